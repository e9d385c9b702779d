"""``vse completion bash``: a bash completion script made from the parser itself."""

from __future__ import annotations

import argparse

from vsekit.cli._base import command


@command
def _add_completion(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("completion", help="print a shell completion script")
    p.add_argument("shell", choices=("bash",), help="the shell")
    p.set_defaults(handler=_completion)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings)


def bash_script(parser: argparse.ArgumentParser) -> str:
    """Commands after ``vse``, sub-commands after a group, options after ``-``, files
    otherwise."""
    commands = _subparsers(parser)
    cases = []
    for name, p in commands.items():
        subs = _subparsers(p)
        words = " ".join([*subs, *_options(p)])
        sub_cases = "".join(
            f'      {s}) opts="{" ".join(_options(sp))}";;\n' for s, sp in subs.items()
        )
        inner = f'    case "${{COMP_WORDS[2]}}" in\n{sub_cases}    esac\n' if subs else ""
        cases.append(f'  {name}) opts="{words}"\n{inner}    ;;\n')
    return (
        '# vse bash completion: eval "$(vse completion bash)"\n'
        "_vse() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" opts=""\n'
        '  if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'    COMPREPLY=($(compgen -W "{" ".join(commands)} --help --version" -- "$cur"))\n'
        "    return\n  fi\n"
        '  case "${COMP_WORDS[1]}" in\n' + "".join(cases) + "  esac\n"
        '  if [[ "$cur" == -* || "$COMP_CWORD" -eq 2 ]]; then\n'
        '    COMPREPLY=($(compgen -W "$opts" -- "$cur"))\n'
        "    [ ${#COMPREPLY[@]} -gt 0 ] && return\n  fi\n"
        '  COMPREPLY=($(compgen -f -- "$cur"))\n'
        "}\ncomplete -o filenames -F _vse vse\n"
    )


def _completion(args: argparse.Namespace) -> int:
    from vsekit.cli import build_parser

    print(bash_script(build_parser()), end="")
    return 0
