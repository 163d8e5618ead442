"""The documentation site: its pages (Markdown), the MkDocs hook and the reference generator."""
