"""An MkDocs hook: every notebook in the docs (``tutorial.ipynb``) also becomes a page
(``tutorial.md``): its Markdown cells as they are, its code cells as Python blocks, and the
outputs stored in it (text, tables as text, PNG images) under each cell.

It reads the notebook's JSON with the standard library, so the site needs no Jupyter package
to render it; ``tests/test_docs.py`` runs the notebook's code in CI.
"""

from __future__ import annotations

import json
from pathlib import Path

from mkdocs.structure.files import File, Files

FENCE = "````"  # four backticks: an output may itself hold a line of three


def _text(value: str | list[str]) -> str:
    return value if isinstance(value, str) else "".join(value)


def _output(output: dict) -> str:
    if output.get("output_type") == "stream":
        return f"{FENCE}text\n{_text(output['text']).rstrip()}\n{FENCE}"
    data = output.get("data", {})
    if "image/png" in data:
        return f"![output](data:image/png;base64,{_text(data['image/png']).strip()})"
    if "text/plain" in data:
        return f"{FENCE}text\n{_text(data['text/plain']).rstrip()}\n{FENCE}"
    if output.get("output_type") == "error":
        return f"{FENCE}text\n{output['ename']}: {output['evalue']}\n{FENCE}"
    return ""


def notebook_markdown(notebook: dict, name: str) -> str:
    """The page of ``notebook`` (its parsed JSON), which is ``name`` in the docs."""
    note = f"*This page is the notebook [`{name}`]({name}) as it last ran: download it to run it.*"
    parts = []
    for cell in notebook["cells"]:
        source = _text(cell["source"]).rstrip()
        if cell["cell_type"] == "markdown":
            parts.append(source)
            if len(parts) == 1:  # under the title
                parts.append(note)
        elif cell["cell_type"] == "code" and source:
            parts.append(f"{FENCE}python\n{source}\n{FENCE}")
            parts.extend(filter(None, map(_output, cell.get("outputs", []))))
    return "\n\n".join(parts) + "\n"


def on_files(files: Files, config) -> Files:
    for notebook in [file for file in files if file.src_uri.endswith(".ipynb")]:
        page = notebook.src_uri.removesuffix(".ipynb") + ".md"
        content = notebook_markdown(
            json.loads(Path(notebook.abs_src_path).read_text()), Path(notebook.src_uri).name
        )
        files.append(File.generated(config, page, content=content))
    return files
