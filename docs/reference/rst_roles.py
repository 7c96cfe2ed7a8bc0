"""A griffe extension of the reference pages (mkdocs.yml loads it; the site does not publish it): the docstrings'
reST roles (``:func:`start_run```, ``:class:`~cleanrl_utils.run.Run```) become links to the object's entry in the
reference where it has one, else code (``start_run``), so that the pages show no ``:func:`` markup; a paragraph's
closing ``::`` (reST's literal block) becomes ``:``."""

import re

import griffe

LITERAL = re.compile(r"(\S)::$|^\s*::$", re.MULTILINE)  # reST's "text::" before a literal block: "text:" in Markdown
ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|data|mod|obj|exc|const):`([^`]+)`")


def _documented(collection, path: str) -> str | None:
    """The path of the reference entry of ``path`` (through imports), or None where the pages show none."""
    try:
        target = collection[path]
        while target.is_alias:
            target = target.target
    except Exception:  # not in the package, or an import of another package
        return None
    parts = target.path.split(".")
    if parts[0] != "cleanrl_utils" or any(part.startswith("_") for part in parts[1:]):
        return None
    if not target.is_module and (target.docstring is None or not target.docstring.value.strip()):
        return None  # undocumented members are not rendered (show_if_no_docstring: false)
    return target.path


class RstRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.name != "cleanrl_utils":
            return
        collection = pkg.modules_collection

        def link(obj, match: re.Match) -> str:
            text = match.group(1).strip()
            titled = re.fullmatch(r"(.*?)\s*<([^>]+)>", text)
            title, name = (titled.group(1), titled.group(2)) if titled else (None, text)
            short = name.startswith("~")
            name = name.lstrip("~!.")
            label = title or (name.rsplit(".", 1)[-1] if short else name)
            scopes, scope = [], obj
            while scope is not None:  # the name as seen from the docstring's object, its class, its module
                scopes.append(scope.path + ".")
                scope = scope.parent
            for prefix in ["", *scopes]:
                path = _documented(collection, prefix + name)
                if path is not None:
                    return f"[`{label}`][{path}]"
            return f"`{label}`"

        def visit(obj) -> None:
            if obj.docstring is not None:
                text = ROLE.sub(lambda match: link(obj, match), obj.docstring.value)
                obj.docstring.value = LITERAL.sub(lambda match: (match.group(1) or "") + (":" if match.group(1) else ""), text)
            for member in obj.members.values():
                if not member.is_alias and member.path.startswith(obj.path + "."):
                    visit(member)

        visit(pkg)
