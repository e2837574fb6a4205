#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown (README.md and docs/*.md): every [text](target) that is not a
URL must name a file or directory that exists, relative to the file holding the link, and a #fragment must name one of
that file's headings (GitHub's anchor rule: lower case, punctuation dropped, spaces to hyphens).

    python3 scripts/check_doc_links.py [ROOT]      # exit 1 listing each broken link as file:line
"""
import pathlib
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    files = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for path in files:
        in_code = False
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                resolved = (path.parent / file_part).resolve() if file_part else path
                if not resolved.exists():
                    broken.append(f"{path.relative_to(root)}:{number}: '{target}': no such file")
                elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                    broken.append(f"{path.relative_to(root)}:{number}: '{target}': no heading '#{fragment}'")
    for item in broken:
        print(item)
    print(f"check_doc_links: {len(files)} files, {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
