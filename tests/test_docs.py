"""The docs name what exists: the tests, paths and make targets that README.md, CONTRIBUTING.md
and docs/ cite, and CONTRIBUTING.md's layout against the tree. CHANGELOG.md is history: only
its Unreleased section is checked (each heading once, what it names exists).

Claims about the code are checked against their one source: the operations README.md says are
native against `patch()`'s; the contract files the docs list against tests/harness/contract.py;
every test file has a line in docs/testing.md; a table quoting `make bench`'s rows against the
results file the text names before it; README.md's time of `make test` against docs/testing.md.

The rules, for each word of code in the text (`like this`):
- a test file, `test_x.py`, `e2e/test_x.py`, `tests/distro/test_x.py` (from the checkout's root
  or tests/; by its name alone, anywhere under tests/), exists; `test_x.py::test_y` names one
  that file defines; a span that is only `test_y` names one some test file defines. A
  parametrised id, `[...]`, is dropped. Test files cited in fenced blocks are checked too.
- a path exists, from the checkout's root: a word with a slash that ends in one of the
  extensions of the checkout's files or starts with one of its top-level names; or a file name
  alone with such an extension, found anywhere in the checkout. Not paths: absolute ones (the
  host's /etc, /var/cache, /proc), URLs, words with a placeholder (`<version>`, `*`, `{id}`,
  `…`), the checkout's outputs (.gitignore's top-level entries: target/, .venv/, ...), and
  OTHERS, the files of glance and glance_store the docs compare against.
- a module run as `python -m`, `tests.harness.x` or `benchmarks.x`, exists.
- `make X` (after any VAR=value words), in code or on a line of a fenced block: X is a target
  of the Makefile.
"""

import ast
import functools
import html
import pathlib
import re
import subprocess

import pytest

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [
    "README.md",
    "CONTRIBUTING.md",
    *sorted(str(p.relative_to(CHECKOUT)) for p in (CHECKOUT / "docs").rglob("*.md")),
]
# glance's and glance_store's files, which the docs compare the driver against.
OTHERS = {"driver.py", "backend.py", "multi_backend.py", "rbd.py", "image_data.py"}
# CONTRIBUTING.md's layout names every top-level folder, and every file directly in these but
# the module files a folder stands for.
LAYOUT_FOLDERS = {
    "src",
    "core/src",
    "core/src/delete",
    "core/src/rbd",
    "core/src/transfer",
    "python/glance_rbd_native",
    "python/glance_rbd_native/leftovers",
    "tests/harness",
}
FOLDER_MODULES = {"mod.rs", "__init__.py"}

TEST_REF = re.compile(r"((?:[\w.-]+/)*test_\w+\.py)((?:::\w+)*)(?:\[.*\])?")
TEST_NAME = re.compile(r"(test_\w+)(?:\[.*\])?")
# Letters, digits and `_ . - /` alone: anything else is a placeholder, an option or prose.
PATH_LIKE = re.compile(r"[\w.][\w.\-/]*")
MODULE = re.compile(r"(?:tests|benchmarks)(?:\.\w+)+")
SPAN = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"\s*```")


@functools.cache
def tree() -> frozenset[str]:
    """The checkout's files, tracked or not, less what .gitignore ignores."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return frozenset(out.splitlines())


@functools.cache
def folders() -> frozenset[str]:
    return frozenset(
        str(parent)
        for path in tree()
        for parent in pathlib.PurePath(path).parents
        if str(parent) != "."
    )


@functools.cache
def top_level() -> frozenset[str]:
    return frozenset(path.split("/")[0] for path in tree())


@functools.cache
def extensions() -> frozenset[str]:
    return frozenset(pathlib.PurePath(path).suffix for path in tree()) - {""}


@functools.cache
def outputs() -> frozenset[str]:
    """The top-level entries .gitignore names (`/target`): build outputs and caches."""
    lines = (CHECKOUT / ".gitignore").read_text().splitlines()
    return frozenset(line.strip("/") for line in lines if re.fullmatch(r"/[\w.-]+/?", line))


@functools.cache
def defined_tests(file: str) -> frozenset[str]:
    """The tests `file` defines: `test_y`, and `Class::test_y` for methods."""
    names = set()
    for node in ast.parse((CHECKOUT / file).read_text()).body:
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
    return frozenset(name for name in names if name.rpartition("::")[2].startswith("test_"))


def files_named(cited: str) -> list[str]:
    """The test files `cited` may name."""
    if "/" in cited:
        return [path for path in (cited, f"tests/{cited}") if path in tree()]
    return sorted(
        path
        for path in tree()
        if path.startswith("tests/") and pathlib.PurePath(path).name == cited
    )


def missing_test(cited: str) -> str | None:
    """What the checkout lacks of `file.py` or `file.py::test_y`, or None."""
    file, names = TEST_REF.fullmatch(cited).groups()
    files = files_named(file)
    if not files:
        return "no such test file under tests/"
    if names and not any(names[2:] in defined_tests(f) for f in files):
        return f"{file} defines no {names[2:]}"
    return None


def missing_path(word: str) -> str | None:
    """What the checkout lacks of the path `word`, or None (also when it is no path)."""
    if not PATH_LIKE.fullmatch(word):
        return None
    if MODULE.fullmatch(word):
        module = word.replace(".", "/")
        if not {f"{module}.py", f"{module}/__init__.py"} & tree():
            return "no such module in the checkout"
        return None
    path = pathlib.PurePath(word)
    if "/" not in word:
        if path.suffix not in extensions() or word in OTHERS:
            return None
        if not any(pathlib.PurePath(p).name == word for p in tree()):
            return "no file of that name in the checkout"
        return None
    if path.parts[0] in outputs() or (
        path.suffix not in extensions() and path.parts[0] not in top_level()
    ):
        return None
    if str(path) not in tree() | folders():
        return "no such file or folder in the checkout"
    return None


@functools.cache
def all_tests() -> frozenset[str]:
    """The names of the tests every test file defines."""
    return frozenset(
        test.rpartition("::")[2]
        for path in tree()
        if path.startswith("tests/") and TEST_REF.fullmatch(pathlib.PurePath(path).name)
        for test in defined_tests(path)
    )


def problems_of_span(span: str) -> list[str]:
    """What the checkout lacks of what the code span `span` cites."""
    if name := TEST_NAME.fullmatch(span):
        return [] if name.group(1) in all_tests() else [f"no test {name.group(1)} in tests/"]
    problems = [
        missing_test(word) if TEST_REF.fullmatch(word) else missing_path(word)
        for word in span.split()
    ]
    return [problem for problem in problems if problem]


def spans(doc: str) -> list[tuple[int, str]]:
    """(line, code) of each code span of `doc` outside fenced blocks, its whitespace made one
    space (a span may break across lines)."""
    prose, fenced = [], False
    for line in (CHECKOUT / doc).read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        prose.append("" if fenced or FENCE.match(line) else line)
    text = "\n".join(prose)
    return [
        (text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()))
        for m in SPAN.finditer(text)
    ]


def fenced_lines(doc: str) -> list[tuple[int, str]]:
    found, fenced = [], False
    for number, line in enumerate((CHECKOUT / doc).read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            found.append((number, line.strip()))
    return found


@functools.cache
def make_targets() -> frozenset[str]:
    text = (CHECKOUT / "Makefile").read_text()
    return frozenset(re.findall(r"^([\w-]+)\s*:(?!=)", text, re.MULTILINE))


def make_target(command: str) -> str | None:
    """X of `make X ...` (after VAR=value words and make's options), or None if not make."""
    words = command.split()
    while words and re.fullmatch(r"\w+=\S*", words[0]):
        words.pop(0)
    if not words or words[0] != "make":
        return None
    return next((w for w in words[1:] if not w.startswith("-") and "=" not in w), None)


@pytest.mark.parametrize("doc", DOCS)
def test_what_the_docs_cite_exists(doc):
    cited = [(line, span, problems_of_span(span)) for line, span in spans(doc)]
    cited += [
        (line, word, [missing_test(word)])
        for line, text in fenced_lines(doc)
        for word in text.split()
        if TEST_REF.fullmatch(word)
    ]
    problems = [
        f"{doc}:{line}: `{what}`: {problem}"
        for line, what, found in cited
        for problem in found
        if problem
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS)
def test_the_make_targets_cited_exist(doc):
    unknown = [
        (line, command)
        for line, command in [*spans(doc), *fenced_lines(doc)]
        if make_target(command) and make_target(command) not in make_targets()
    ]
    assert not unknown, "\n".join(
        f"{doc}:{line}: `{command}`: the Makefile has no target {make_target(command)}"
        for line, command in unknown
    )


def layout() -> list[str]:
    """The lines of the code block of CONTRIBUTING.md's "## Layout"."""
    text = (CHECKOUT / "CONTRIBUTING.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1].splitlines()[1:]


def layout_entries() -> list[str]:
    """The paths the layout lists: a line's first word (`a, b` lists two), from the checkout's
    root, or below the last top-level folder listed when indented a little; the descriptions'
    continuation lines, indented further, list none."""
    entries, parent = [], ""
    for line in layout():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent > 4:
            continue
        words = line.split()
        names = words[:1]
        while names[-1].endswith(","):
            names.append(words[len(names)])
        names = [name.rstrip(",") for name in names]
        if indent == 0:
            parent = names[0] if names[0].endswith("/") else ""
            entries += names
        else:
            entries += [parent + name for name in names]
    return entries


def test_the_layout_lists_what_exists():
    missing = [entry for entry in layout_entries() if entry.rstrip("/") not in tree() | folders()]
    assert not missing, f"CONTRIBUTING.md's Layout lists what the checkout lacks: {missing}"


def test_the_layout_names_every_folder_and_module():
    text = "\n".join(layout())
    wanted = sorted({path.split("/")[0] + "/" for path in tree() if "/" in path})
    wanted += sorted(
        path
        for path in tree()
        if str(pathlib.PurePath(path).parent) in LAYOUT_FOLDERS
        and pathlib.PurePath(path).name not in FOLDER_MODULES
    )
    unnamed = [
        path
        for path in wanted
        if path not in layout_entries()
        and not re.search(rf"(?<![\w.]){re.escape(pathlib.PurePath(path).name)}(?!\w)", text)
    ]
    assert not unnamed, (
        f"CONTRIBUTING.md's Layout names neither the path nor the file name of: {unnamed}"
    )


# What a test can see of the claims the docs make about the code, each from its one source.
PATCHING = CHECKOUT / "python/glance_rbd_native/patching.py"
TESTING = "docs/testing.md"
RESULTS = re.compile(r"benchmarks/results/[\w.-]+\.json")
TABLE_HEADER = "| case | measured | target | met |"
UNRELEASED_HEADINGS = ("### Added", "### Changed", "### Fixed")


def native_operations() -> set[str]:
    """The Store methods `patch()` replaces: patching's `METHODS`."""
    for node in ast.walk(ast.parse(PATCHING.read_text())):
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["METHODS"]
            and isinstance(node.value, ast.Tuple)
        ):
            return {key.value for key in node.value.elts if isinstance(key, ast.Constant)}
    raise AssertionError(f"no `METHODS = (...)` in {PATCHING}")


def sentences_with(doc: str, words: str) -> list[str]:
    """The sentences of `doc` (its lines joined) that contain `words`."""
    text = " ".join((CHECKOUT / doc).read_text().split())
    return [s for s in re.split(r"(?<=[.:;])\s", text) if words in s]


@pytest.mark.parametrize("says", ["replaces the driver's", "are native;"])
def test_the_readme_names_the_operations_the_patch_replaces(says):
    (sentence,) = sentences_with("README.md", says)
    named = {span.removeprefix("Store.") for span in SPAN.findall(sentence)}
    assert named == native_operations(), f"README.md: {sentence!r}"


def test_the_contract_files_are_named_as_the_guard_names_them():
    """Each paragraph that lists the contract files after `tests/harness/contract.py` lists its
    FILES, all of them."""
    from tests.harness import contract

    wrong = []
    for doc in DOCS:
        for paragraph in (CHECKOUT / doc).read_text().split("\n\n"):
            if "contract files" not in paragraph or "`tests/harness/contract.py`" not in paragraph:
                continue
            named = {
                span for span in SPAN.findall(paragraph) if re.fullmatch(r"test_\w+\.py", span)
            }
            if named != set(contract.FILES):
                wrong.append(f"{doc}: {sorted(named)}")
    assert not wrong, f"the contract files are {sorted(contract.FILES)}, not:\n" + "\n".join(wrong)


def test_every_test_file_is_in_testing_md():
    text = (CHECKOUT / TESTING).read_text()
    files = [p for p in tree() if re.fullmatch(r"tests/(e2e/|distro/)?test_\w+\.py", p)]
    missing = [p for p in files if not re.search(rf"`[\w/]*\b{pathlib.PurePath(p).name}`", text)]
    assert not missing, f"{TESTING} does not name: {missing}"


def quoted_tables(doc: str) -> list[tuple[str, int, list[list[str]]]]:
    """(results file, line, rows) of each table of `doc` that quotes `make bench`'s rows: the
    results file is the last one the text names before the table."""
    lines = (CHECKOUT / doc).read_text().splitlines()
    tables = []
    for number, line in enumerate(lines):
        if line.strip() != TABLE_HEADER:
            continue
        named = [m for before in lines[:number] for m in RESULTS.findall(before)]
        assert named, f"{doc}:{number + 1}: a table of results without its results file"
        rows = []
        for row in lines[number + 2 :]:
            if not row.startswith("|"):
                break
            cells = row.strip().strip("|").split(" | ")
            rows.append([html.unescape(cell.strip()) for cell in cells])  # `&#124;` is a `|`
        tables.append((named[-1], number + 1, rows))
    return tables


@pytest.mark.parametrize("doc", DOCS)
def test_the_figures_quoted_from_a_results_file_are_its_own(doc):
    import json

    met_words = {True: "yes", False: "no", None: "-"}
    wrong = []
    for results, line, rows in quoted_tables(doc):
        kept = json.loads((CHECKOUT / results).read_text())["rows"]
        by_case = {row["case"]: row for row in kept}
        for case, measured, target, met in rows:
            row = by_case.get(case)
            if row is None or (measured, target, met) != (
                row["measured"],
                row["target"],
                met_words[row["met"]],
            ):
                wrong.append(f"{doc}:{line}: {case!r} is not {results}'s row")
    assert not wrong, "\n".join(wrong)


def test_the_time_of_make_test_is_testing_md_s():
    """README.md quotes the time of `make test` that docs/testing.md's table gives."""
    (quoted,) = re.findall(
        r"`make test` took ([\d.]+) minutes", (CHECKOUT / "README.md").read_text()
    )
    (row,) = [
        line
        for line in (CHECKOUT / TESTING).read_text().splitlines()
        if line.startswith("| `make test` |")
    ]
    assert f"| {quoted} min on a fresh machine" in row, row


def test_the_changelog_s_unreleased_section_has_each_heading_once_and_names_what_exists():
    text = (CHECKOUT / "CHANGELOG.md").read_text()
    unreleased = text.split("\n## Unreleased\n", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### .*$", unreleased, re.MULTILINE)
    assert sorted(headings) == sorted(set(headings)), headings
    assert set(headings) <= set(UNRELEASED_HEADINGS), headings
    prose = re.sub(r"```.*?```", "", unreleased, flags=re.DOTALL)
    problems = [
        f"`{span}`: {problem}"
        for span in (" ".join(s.split()) for s in SPAN.findall(prose))
        for problem in problems_of_span(span)
    ]
    assert not problems, "\n".join(problems)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("doc", DOCS)
def test_a_table_of_contents_lists_every_section(doc):
    """A doc that opens with a list of its sections lists each `##` heading, in order."""
    text = (CHECKOUT / doc).read_text()
    before_sections = text.split("\n## ", 1)[0]
    listed = re.findall(r"^- \[[^\]]+\]\(#([\w-]+)\)$", before_sections, re.MULTILINE)
    if not listed:
        return
    sections = [slug(h) for h in re.findall(r"^## (.+)$", text, re.MULTILINE)]
    assert listed == sections, f"{doc}: its contents {listed}, its sections {sections}"
