"""A finished run behind HTTP: the JSON API, micro-batching and the attention explorer.

``engine`` (the run in memory: validate, recommend in one forward pass, explain with the lens),
``batching`` (concurrent requests into shared forward passes), ``schemas`` (request and answer
shapes, size limits), ``app`` (FastAPI routes, error answers, the body limit), ``api_docs``
(``/docs`` and ``/redoc`` without a CDN), ``server`` (uvicorn) and ``static/`` (the explorer
page, no network needed). Imports rec and the lens;
only the CLI imports it.
"""
