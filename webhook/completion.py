"""`kgwe completion bash|zsh`: shell completion scripts generated from the argparse parsers themselves, so a
new command or flag completes without anyone editing a script (and no completion library is needed).

What completes: the commands (with their help in zsh), each command's flags and sub-commands, the values of
flags with choices (`-o table|wide|json|yaml`, `--log-level`), and file names everywhere else.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh")
_SAFE = re.compile(r"^[A-Za-z0-9_./:=+-]+$")  # what may go unquoted into a shell word list


@dataclass
class CommandWords:
    """What completes after `kgwe COMMAND`: its flags, its sub-commands, and each flag's choices."""

    help: str = ""
    flags: list[str] = field(default_factory=list)
    subcommands: list[str] = field(default_factory=list)
    choices: dict[str, list[str]] = field(default_factory=dict)


def words_of(parser: argparse.ArgumentParser, help_text: str = "") -> CommandWords:
    found = CommandWords(help=help_text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.subcommands.extend(str(name) for name in action.choices)
            continue
        if not action.option_strings and action.choices is not None:  # `kgwe completion SHELL`
            found.subcommands.extend(str(choice) for choice in action.choices)
        found.flags.extend(action.option_strings)
        if action.option_strings and action.choices is not None:
            values = [str(choice) for choice in action.choices]
            for flag in action.option_strings:
                found.choices[flag] = values
    return found


def _words(values: list[str]) -> str:
    # Every word comes from our own parsers; anything a shell could read as syntax is left out, not quoted.
    return " ".join(v for v in values if _SAFE.match(v))


def bash_script(top: CommandWords, commands: dict[str, CommandWords]) -> str:
    lines = [
        "# kgwe completion for bash: source <(kgwe completion bash)",
        "_kgwe() {",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    case "${COMP_WORDS[i]}" in',
        "      --log-level) ((i++)) ;;",
        "      -*) ;;",
        '      *) cmd="${COMP_WORDS[i]}"; break ;;',
        "    esac",
        "  done",
        '  local words=""',
        '  case "$cmd:$prev" in',
    ]
    for flag, values in top.choices.items():
        lines.append(f'    ":{flag}") words="{_words(values)}" ;;')
    for name, command in commands.items():
        for flag, values in command.choices.items():
            lines.append(f'    "{name}:{flag}") words="{_words(values)}" ;;')
    lines += [
        "  esac",
        '  if [[ -n "$words" ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); return; fi',
        '  if [[ -z "$cmd" ]]; then',
        f'    COMPREPLY=($(compgen -W "{_words([*commands, *top.flags])}" -- "$cur")); return',
        "  fi",
        '  local flags="" subs=""',
        '  case "$cmd" in',
    ]
    for name, command in commands.items():
        lines.append(f'    {name}) flags="{_words(command.flags)}"; subs="{_words(command.subcommands)}" ;;')
    lines += [
        "  esac",
        '  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$flags" -- "$cur"))',
        '  elif [[ -n "$subs" && "$prev" == "$cmd" ]]; then COMPREPLY=($(compgen -W "$subs" -- "$cur"))',
        '  else COMPREPLY=($(compgen -f -- "$cur"))',
        "  fi",
        "  return 0",
        "}",
        "complete -o filenames -F _kgwe kgwe",
    ]
    return "\n".join(lines)


def _zsh_described(name: str, text: str) -> str:
    plain = re.sub(r"[^A-Za-z0-9 ,.;()/+=_-]", "", text)[:70]
    return f"'{name}:{plain}'"


def zsh_script(top: CommandWords, commands: dict[str, CommandWords]) -> str:
    lines = [
        "#compdef kgwe",
        "# kgwe completion for zsh: source <(kgwe completion zsh), or save as _kgwe in a directory of $fpath",
        "_kgwe() {",
        "  local cmd i",
        "  for ((i = 2; i < CURRENT; i++)); do",
        "    case $words[i] in",
        "      --log-level) ((i++)) ;;",
        "      -*) ;;",
        "      *) cmd=$words[i]; break ;;",
        "    esac",
        "  done",
        '  case "$cmd:$words[CURRENT-1]" in',
    ]
    for flag, values in top.choices.items():
        lines.append(f'    ":{flag}") compadd -- {_words(values)}; return ;;')
    for name, command in commands.items():
        for flag, values in command.choices.items():
            lines.append(f'    "{name}:{flag}") compadd -- {_words(values)}; return ;;')
    described = " ".join(_zsh_described(name, c.help) for name, c in commands.items() if _SAFE.match(name))
    lines += [
        "  esac",
        '  if [[ -z "$cmd" ]]; then',
        f"    local -a commands=({described})",
        f"    if [[ $PREFIX == -* ]]; then compadd -- {_words(top.flags)}; else _describe command commands; fi",
        "    return",
        "  fi",
        "  case $cmd in",
    ]
    for name, command in commands.items():
        flags, subs = _words(command.flags), _words(command.subcommands)
        sub_line = f"[[ $CURRENT -eq $((i + 1)) ]] && {{ compadd -- {subs}; return; }}; " if subs else ""
        lines.append(f"    {name}) {sub_line}[[ $PREFIX == -* ]] && {{ compadd -- {flags}; return; }} ;;")
    lines += [
        "  esac",
        "  _files",
        "}",
        'if [[ "$funcstack[1]" == _kgwe ]]; then _kgwe "$@"; else compdef _kgwe kgwe; fi',
    ]
    return "\n".join(lines)


def script(shell: str, top: CommandWords, commands: dict[str, CommandWords]) -> str:
    return bash_script(top, commands) if shell == "bash" else zsh_script(top, commands)
