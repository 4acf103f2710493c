"""The streaming (prequential) protocol: the global event log, predicted chunk by chunk before
the model learns from each chunk (``runner.py``), with PI-Transformer's privileged labels, a
Transformer-XL memory and replay streams. Transferring the online continual-learning recipe of
arXiv 2403.01554 to a recommendation event stream is our design (see ``events.py`` and
``attnsvm.rec.models.pitransformer``)."""

from attnsvm.rec.stream.config import StreamConfig, StreamData, StreamSettings, load_stream_config
from attnsvm.rec.stream.events import EventStream, load_stream
from attnsvm.rec.stream.runner import resume_stream, run_stream

__all__ = [
    "EventStream",
    "StreamConfig",
    "StreamData",
    "StreamSettings",
    "load_stream",
    "load_stream_config",
    "resume_stream",
    "run_stream",
]
