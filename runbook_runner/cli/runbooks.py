"""The commands about runbook files: list, show, validate and new (no host involved).

Part of the CLI layer (cli/): it prints and picks exit codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runbook_runner.errors import UsageError
from runbook_runner.exitcodes import ExitCode
from runbook_runner.safetext import visible


def _err(message: str) -> None:
    print(visible(message), file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    from runbook_runner.cli import host as cli_host
    from runbook_runner.cli import render
    from runbook_runner.runbook import RunbookInvalid, load

    runbooks, broken = [], []
    for name, path in cli_host.catalog(args).paths().items():
        try:
            runbooks.append(load(path))
        except RunbookInvalid as error:
            broken.append((name, len(error.problems)))
    if not runbooks and not broken:
        folders = ", ".join(str(f) for f in cli_host.catalog(args).folders)
        _err(f"no runbooks found in {folders}")
        return ExitCode.BAD_INPUT
    print(render.runbook_list(runbooks))
    for name, count in broken:
        _err(f"{name}: invalid ({render.plural(count, 'error')}); see 'runbook validate {name}'")
    return ExitCode.BAD_INPUT if broken else ExitCode.OK


def cmd_show(args: argparse.Namespace) -> int:
    if args.parsers:
        from runbook_runner.observe import reference

        print(reference.text(), end="")
        return ExitCode.OK
    if not args.runbook:
        raise UsageError("show needs a runbook NAME (or --parsers)", "runbook show")
    from runbook_runner.cli import host as cli_host
    from runbook_runner.cli import render

    print(render.runbook_details(cli_host.load_named(args)))
    return ExitCode.OK


def _validation_targets(args: argparse.Namespace) -> list[Path]:
    from runbook_runner.cli import host as cli_host

    catalog = cli_host.catalog(args)
    if not args.paths:
        return list(catalog.paths().values())
    targets: list[Path] = []
    for given in args.paths:
        path = Path(given)
        if path.is_dir():
            targets += sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        elif path.exists():
            targets.append(path)
        else:
            targets.append(catalog.find(given))
    return targets


def cmd_validate(args: argparse.Namespace) -> int:
    from runbook_runner.cli import render
    from runbook_runner.runbook import RunbookInvalid, load

    targets = _validation_targets(args)
    if not targets:
        _err("nothing to validate: no runbook files found")
        return ExitCode.BAD_INPUT
    invalid = errors = 0
    for path in targets:
        try:
            runbook = load(path)
        except RunbookInvalid as error:
            invalid += 1
            errors += len(error.lines)
            for line in error.lines:
                print(visible(line, lines=False))
            continue
        for warning in runbook.warnings:
            print(warning)
        if not args.quiet:
            print(f"{runbook.path}: ok ({render.plural(len(runbook.steps), 'step')})")
    if invalid:
        _err(
            f"{invalid} of {render.plural(len(targets), 'runbook')} invalid, "
            f"{render.plural(errors, 'error')}"
        )
        return ExitCode.BAD_INPUT
    _err(f"{render.plural(len(targets), 'runbook')} valid")
    return ExitCode.OK


def cmd_new(args: argparse.Namespace) -> int:
    """Write runbooks/NAME.yaml, link it from a docs page, and say what to run next."""
    import os

    from runbook_runner.cli import authoring
    from runbook_runner.format.catalog import search_path

    try:
        authoring.check_name(args.name)
    except authoring.AuthoringError as error:
        raise UsageError(str(error), "runbook new") from None
    folder = (
        search_path(args.runbooks, os.environ)[0]
        if args.runbooks or os.environ.get("RUNBOOK_PATH")
        else Path("runbooks")
    )
    target = folder / f"{args.name}.yaml"
    if target.exists():
        raise UsageError(f"{target} already exists; edit it, or pick another name", "runbook new")
    docs = folder.parent / "docs"
    pages = authoring.docs_pages(docs)
    page = args.docs or _ask_page(pages)
    if pages and page not in pages:
        raise UsageError(
            f"--docs {page}: no such page under {docs} (pages: {', '.join(pages)})", "runbook new"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with open(target, "x", encoding="utf-8") as handle:  # "x": never overwrite
        handle.write(authoring.skeleton(args.name, page))
    print(f"wrote {target}")
    if pages:
        title = args.name.replace("-", " ").capitalize()
        with open(docs / page, "a", encoding="utf-8") as handle:
            handle.write(authoring.docs_link(page, args.name, title))
        print(f"linked it from {docs / page}")
        _add_runbook_to_nav(folder.parent / "mkdocs.yml", args.name, title)
    print("next:")
    print(f"  runbook validate {target}")
    print(f"  runbook show {target}")
    print(f"  runbook test {target} --state STATE.yaml   # or --scenario oom-crash")
    return ExitCode.OK


def _add_runbook_to_nav(mkdocs_yml: Path, name: str, title: str) -> None:
    """List the runbook's page under the site's Runbooks nav, when the site has one."""
    from runbook_runner.kb.postmortem import add_to_nav

    if not mkdocs_yml.is_file():
        return
    try:
        nav = add_to_nav(
            mkdocs_yml.read_text(encoding="utf-8"), title, f"runbooks/{name}.md", "Runbooks"
        )
    except ValueError:
        return  # a site without a Runbooks section: its nav is the author's to arrange
    mkdocs_yml.write_text(nav, encoding="utf-8")
    print(f"added it to the nav in {mkdocs_yml}")


def _ask_page(pages: list[str]) -> str:
    if not pages:
        raise UsageError("no docs pages found: give --docs PAGE", "runbook new")
    if not sys.stdin.isatty():
        raise UsageError(
            f"which docs page does it belong to? give --docs PAGE (pages: {', '.join(pages)})",
            "runbook new",
        )
    for number, page in enumerate(pages, start=1):
        print(f"  {number}. {page}")
    answer = input("Docs page it belongs to (number): ").strip()
    if not answer.isdigit() or not 1 <= int(answer) <= len(pages):
        raise UsageError(f"{answer!r} is not one of the numbers above", "runbook new")
    return pages[int(answer) - 1]
