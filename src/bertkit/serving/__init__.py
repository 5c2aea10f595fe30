"""`bertkit serve`: an HTTP server with dynamic batching for any model folder (needs the serve extra)."""

from .app import API_KEY_ENV, ModelService, ServeConfig, create_app, detect_task, serve

__all__ = ["API_KEY_ENV", "ModelService", "ServeConfig", "create_app", "detect_task", "serve"]
