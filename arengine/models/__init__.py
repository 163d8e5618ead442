"""The loaded models: the registry that reads each model folder's manifest, builds its kind's
recognizer and warms it up (`registry`). The kinds themselves are `arengine/kinds/`; the
repository's `models/` folder (manifests, vendored weights, cards) is installed as
`arengine.models.builtin`.

May import: audio, errors, kinds, postprocess.
"""

from pathlib import Path

PACKAGED_MODELS_DIR = Path(__file__).resolve().parent / "builtin"
"""Where an installed package holds its built-in models (pyproject.toml installs the
repository's `models/` folder there); absent in a checkout and an editable install."""

DEFAULT_MODELS_DIR = (
    PACKAGED_MODELS_DIR
    if PACKAGED_MODELS_DIR.is_dir()
    else Path(__file__).resolve().parents[2] / "models"
)
"""The built-in models: the installed package's own, or the repository's `models/` folder."""
