import sys
from pathlib import Path

# Tests import the package from the source tree (the extension runs it the same way, via PYTHONPATH).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
