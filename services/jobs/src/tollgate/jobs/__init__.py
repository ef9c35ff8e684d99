"""tollgate.jobs: The Goop controller: fans out worker Jobs (or one per node) and reports completion."""
