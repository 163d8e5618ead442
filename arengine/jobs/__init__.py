"""Jobs: recognitions that outlive their connection and the process (`store.py`, `runner.py`)."""
