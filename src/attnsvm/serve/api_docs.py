"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), working offline.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc's fonts from Google), so on
an air-gapped serving host they stay blank. Here their JavaScript, CSS and icon come from the
``fastapi-offline`` package (Swagger UI 5, which reads the OpenAPI 3.1 schema FastAPI writes),
served by the app itself under ``/docs-assets``: the pages name no other host.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = resources.files("fastapi_offline") / "static"
ASSETS_URL = "/docs-assets"


def add_api_docs(app: FastAPI) -> None:
    """``/docs`` and ``/redoc`` for ``app`` (created with ``docs_url=None, redoc_url=None``),
    their files under ``ASSETS_URL``."""
    app.mount(ASSETS_URL, StaticFiles(directory=str(ASSETS)), name="docs-assets")
    schema, icon = app.openapi_url, f"{ASSETS_URL}/favicon.png"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=schema,
            title=f"{app.title}: API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=icon,
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=schema,
            title=f"{app.title}: API",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=icon,
            with_google_fonts=False,
        )
