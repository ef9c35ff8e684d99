"""tollgate.webhook: Admission webhook (FastAPI) that defaults and validates every tollgate kind."""
