"""The HTTPS admission server: FastAPI routes, one per kind and operation, served by uvicorn over TLS."""
