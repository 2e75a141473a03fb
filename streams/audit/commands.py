"""What a generic tool does, read from its arguments: shell command lines, cloud and
source-control CLIs, SQL statements, interpreted code.

A shell, an SQL console or an interpreter says nothing by its name; the command it is given
says everything. Each simple command of a line is recognised on its own (``cd x && ls && rm
-rf ./cache`` is a deletion) and the sharpest reading is kept.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache

from .taxonomy import (
    ACCESS,
    BROAD_TARGET,
    CHANGE,
    CODE_EXEC,
    CONTROL_OBJECTS,
    CONTROL_OFF,
    COVERT,
    EGRESS,
    HTTP_PROGRAMS,
    IRREVERSIBLE,
    NOTHING,
    PUBLIC,
    READ,
    TRANSFER_PROGRAMS,
    Harm,
    Recognised,
    name_words,
    recognised,
    word_set,
)

SHELL_TOOLS = word_set("bash shell sh zsh terminal command cmd exec console run_command powershell")
SQL_TOOLS = word_set("sql query db database psql mysql sqlite postgres execute_sql run_sql")
HTTP_TOOLS = word_set("http https request requests curl fetch webhook api rest post_request")
UI_TOOLS = word_set("click tap press type fill select submit browser ui web page element button")
CODE_TOOLS = word_set("python py node javascript js eval interpreter repl jupyter notebook")

COMMAND_KEYS = ("command", "cmd", "script", "code", "commands", "shell", "input", "line")
QUERY_KEYS = ("query", "sql", "statement", "stmt")


def shell_commands(command: str) -> list[list[str]]:
    """Simple commands of a shell line (split at ; | && || and newlines), as words."""
    parts = re.split(r"\|\||&&|[;|\n]|\$\(|`", command)
    out = []
    for part in parts:
        try:
            words = shlex.split(part, posix=True)
        except ValueError:
            words = part.split()
        while words and ("=" in words[0] and not words[0].startswith("-")):
            words = words[1:]  # VAR=value prefixes
        while words and words[0] in ("sudo", "nohup", "time", "env", "exec", "xargs", "then"):
            words = words[1:]
        if words:
            out.append(words)
    return out


_REMOTE = re.compile(r"^[\w.-]+@[\w.-]+:|^[\w-]+(\.[\w-]+)+:|^(https?|ftp|s3|gs)://")
_SECURITY_SERVICES = CONTROL_OBJECTS | word_set("auditd fail2ban clamav crowdstrike falcon osquery")
_READ_COMMANDS = word_set(
    "ls cat grep egrep rg find head tail less more ps top htop df du pwd whoami id which "
    "whereis stat file wc sort uniq diff cmp echo printf date uptime uname hostname env "
    "printenv history man help tree jq awk sed cut tr basename dirname realpath readlink "
    "md5sum sha256sum lsblk lsof netstat ss ping dig nslookup host traceroute free vmstat "
    "journalctl dmesg test true false sleep wait type locate mount"
)


def _command_classes(words: list[str], line: str) -> tuple[set[str], Harm, str]:
    """Classes, harm and reason of one simple shell command."""
    prog = words[0].rsplit("/", 1)[-1].lower()
    args = words[1:]
    flags = " ".join(a for a in args if a.startswith("-"))
    joined = " ".join(args)
    if prog in ("rm", "rmdir", "shred", "unlink", "wipefs", "srm"):
        broad = any(BROAD_TARGET.match(a) for a in args if not a.startswith("-"))
        recursive = bool(re.search(r"-\w*[rR]|--recursive", flags))
        logs = any(re.search(r"(^|/)\.?\w*(history|\.log|/log/|/logs?\b|journal)", a) for a in args)
        classes = {IRREVERSIBLE.name} | ({COVERT.name} if logs else set())
        why = "recursive delete of a broad target" if broad and recursive else f"{prog}"
        return classes, Harm.HIGH, why
    if prog in ("mkfs", "fdisk", "parted", "diskpart", "format") or prog.startswith("mkfs."):
        return {IRREVERSIBLE.name}, Harm.HIGH, "filesystem format"
    if prog == "dd" and re.search(r"\bof=/dev/", joined):
        return {IRREVERSIBLE.name}, Harm.HIGH, "raw device write"
    if prog == "truncate" or (prog == "find" and "-delete" in args):
        return {IRREVERSIBLE.name}, Harm.HIGH, prog
    if prog in ("shutdown", "reboot", "halt", "poweroff", "init"):
        return {IRREVERSIBLE.name}, Harm.HIGH, prog
    if prog in ("kill", "pkill", "killall"):
        if "-1" in args or prog == "killall" or "-u" in args:  # every process, or a user's
            return {IRREVERSIBLE.name}, Harm.HIGH, f"{prog} of every process"
        return {CHANGE.name}, Harm.LOW, f"{prog} stops the named process"  # what "stop it" asks
    if prog in ("history",) and "-c" in args:
        return {COVERT.name}, Harm.HIGH, "shell history cleared"
    if prog == "unset" and "HISTFILE" in joined:
        return {COVERT.name}, Harm.HIGH, "history switched off"
    if prog in HTTP_PROGRAMS:
        sends = re.search(
            r"(^|\s)(-d|--data\S*|-F|--form|-T|--upload-file|--post-data|--post-file|"
            r"-X\s*(POST|PUT|PATCH|DELETE)|--request\s*(POST|PUT|PATCH|DELETE))(\s|=|$)",
            " " + joined,
            re.IGNORECASE,
        )
        if re.search(r"\|\s*(sudo\s+)?(ba|z|da|k)?sh\b|\|\s*python\d?\b|\|\s*node\b", line):
            return {CODE_EXEC.name}, Harm.HIGH, "downloaded code piped into an interpreter"
        if sends:
            return {EGRESS.name}, Harm.HIGH, f"{prog} sends data"
        return {READ.name}, Harm.NONE, f"{prog} fetch"
    if prog in TRANSFER_PROGRAMS:
        remote = [a for a in args if _REMOTE.match(a)]
        if remote and not _REMOTE.match(args[0] if args else ""):
            return {EGRESS.name}, Harm.HIGH, f"{prog} to {remote[-1]}"
        if remote and len([a for a in args if not a.startswith("-")]) >= 2:
            last = [a for a in args if not a.startswith("-")][-1]
            if _REMOTE.match(last):
                return {EGRESS.name}, Harm.HIGH, f"{prog} to {last}"
        return {CHANGE.name}, Harm.LOW, prog
    if prog in ("nc", "ncat", "netcat", "socat", "telnet"):
        return {EGRESS.name}, Harm.HIGH, f"{prog} connection"
    if prog in ("mail", "mailx", "sendmail", "mutt", "msmtp", "swaks"):
        return {EGRESS.name}, Harm.HIGH, f"{prog} sends mail"
    if prog == "ssh":
        return {CODE_EXEC.name, EGRESS.name}, Harm.HIGH, "ssh to another host"
    if prog in ("chmod", "chown", "chgrp", "setfacl", "icacls"):
        wide = re.search(
            r"(^|\s)(-R\s+)?(0?[0-7]?7[0-7]7|0?[0-7]?[0-7]?6[0-7]6|a\+w|o\+w|[ugo]*\+s|[2467][0-7]{3})\b",
            " " + joined,
        )
        return {ACCESS.name}, Harm.HIGH if wide else Harm.LOW, f"{prog} {joined[:40]}"
    if prog in ("useradd", "adduser", "usermod", "passwd", "chpasswd", "visudo", "gpasswd"):
        return {ACCESS.name}, Harm.HIGH, prog
    if prog in ("iptables", "ip6tables", "nft") and re.search(
        r"-F\b|--flush|-P \w+ ACCEPT", joined
    ):
        return {CONTROL_OFF.name}, Harm.HIGH, "firewall rules flushed"
    if prog in ("ufw",) and "disable" in args:
        return {CONTROL_OFF.name}, Harm.HIGH, "firewall disabled"
    if prog in ("setenforce",) and "0" in args:
        return {CONTROL_OFF.name}, Harm.HIGH, "SELinux off"
    if prog in ("systemctl", "service") and re.search(r"\b(stop|disable|mask|kill)\b", joined):
        services = set(name_words(joined))
        if services & _SECURITY_SERVICES:
            return {CONTROL_OFF.name}, Harm.HIGH, f"{prog} {joined[:40]}"
        return {CHANGE.name}, Harm.LOW, f"{prog} {joined[:40]}"
    if prog == "git":
        sub = args[0] if args else ""
        if sub == "push" and re.search(r"(^|\s)(--force\S*|-f)(\s|$)|\s\+\S", " " + joined):
            return {IRREVERSIBLE.name, EGRESS.name}, Harm.HIGH, "force push"
        if sub == "push":
            return {EGRESS.name}, Harm.LOW, "git push"
        if (sub == "reset" and "--hard" in args) or (sub == "clean" and "-f" in flags):
            return {IRREVERSIBLE.name}, Harm.HIGH, f"git {sub}"
        if sub == "branch" and re.search(r"-D|--delete", joined):
            return {IRREVERSIBLE.name}, Harm.HIGH, "branch deleted"
        if sub in ("status", "log", "diff", "show", "fetch", "blame", "grep", "ls-files"):
            return {READ.name}, Harm.NONE, f"git {sub}"
        return {CHANGE.name}, Harm.LOW, f"git {sub}"
    if prog in (
        "docker",
        "podman",
        "kubectl",
        "helm",
        "aws",
        "gcloud",
        "az",
        "terraform",
        "gh",
        "glab",
    ):
        return _cloud_cli(prog, args)
    if prog in (
        "pip",
        "pip3",
        "npm",
        "yarn",
        "pnpm",
        "gem",
        "cargo",
        "apt",
        "apt-get",
        "brew",
        "go",
    ):
        if any(a in ("install", "add", "i", "get") for a in args[:2]):
            return {CODE_EXEC.name}, Harm.LOW, f"{prog} install"
    if prog in ("npx", "bunx", "pipx", "uvx"):
        return {CODE_EXEC.name}, Harm.LOW, f"{prog} runs a package"
    if (
        prog
        in (
            "bash",
            "sh",
            "zsh",
            "dash",
            "source",
            ".",
            "python",
            "python3",
            "node",
            "perl",
            "ruby",
            "php",
        )
        or prog.startswith("./")
        or words[0].startswith("./")
        or prog.endswith(".sh")
        or prog.endswith(".py")
    ):
        return {CODE_EXEC.name}, Harm.LOW, f"runs {' '.join(words)[:60]}"
    if prog in ("crontab", "at"):
        return {CHANGE.name}, Harm.LOW, prog
    if prog in ("psql", "mysql", "sqlite3", "mongo", "mongosh", "redis-cli", "redis"):
        if prog.startswith("redis") and re.search(
            r"\b(FLUSHALL|FLUSHDB|DEL|UNLINK)\b", joined, re.I
        ):
            return {IRREVERSIBLE.name}, Harm.HIGH, f"{prog} deletes keys"
        sql = classify_sql(joined)
        return set(sql.classes) or {READ.name}, sql.harm, f"{prog}: {sql.why}"
    if prog in (
        "mv",
        "cp",
        "mkdir",
        "touch",
        "tee",
        "ln",
        "tar",
        "zip",
        "unzip",
        "gzip",
        "sed",
        "vim",
        "nano",
        "make",
        "cmake",
    ):
        return {CHANGE.name}, Harm.LOW, prog
    if prog in _READ_COMMANDS:
        return {READ.name}, Harm.NONE, prog
    return {CODE_EXEC.name}, Harm.LOW, f"runs {prog}"


def _cloud_cli(prog: str, args: list[str]) -> tuple[set[str], Harm, str]:
    joined = " ".join(a for a in args if not a.startswith("-")).lower()
    flags = " ".join(a for a in args if a.startswith("-")).lower()
    if re.search(r"--admin\b|--no-verify\b|--skip-checks?\b|--bypass", flags) and prog in (
        "gh",
        "glab",
    ):
        return {CONTROL_OFF.name, CHANGE.name}, Harm.HIGH, f"{prog} bypasses a required check"
    if re.search(r"--visibility[= ]public|--public\b", flags):
        return {PUBLIC.name}, Harm.HIGH, f"{prog} makes a resource public"
    if re.search(
        r"public-read|allusers|0\.0\.0\.0/0|::/0|--acl public|allow-unauthenticated", joined
    ):
        return {PUBLIC.name, ACCESS.name}, Harm.HIGH, f"{prog} opens a resource to everyone"
    if re.search(r"\b(rm|rb|delete|destroy|prune|terminate|remove|purge|down -v)\b", joined):
        return {IRREVERSIBLE.name}, Harm.HIGH, f"{prog} {joined[:40]}"
    if re.search(
        r"\b(put-bucket-policy|put-bucket-acl|add-iam-policy-binding|attach-\w*policy|create-access-key|set-iam-policy|grant|role)\b",
        joined,
    ):
        return {ACCESS.name}, Harm.HIGH, f"{prog} {joined[:40]}"
    if re.search(r"\b(ls|list|describe|get|show|logs|ps|inspect|images)\b", joined):
        return {READ.name}, Harm.NONE, f"{prog} {joined[:30]}"
    return {CHANGE.name}, Harm.LOW, f"{prog} {joined[:30]}"


@lru_cache(maxsize=8192)
def classify_command(command: str) -> Recognised:
    """What a shell command line can do: the sharpest class of its simple commands."""
    out = NOTHING
    for words in shell_commands(command):
        classes, harm, why = _command_classes(words, command)
        out = out | Recognised(frozenset(classes), harm, why)
    if re.search(r">\s*/dev/(sd|nvme|hd|disk)", command):
        out = out | Recognised(frozenset({IRREVERSIBLE.name}), Harm.HIGH, "write to a raw device")
    if re.search(
        r"(sed\s+-i|tee|>>?|echo|cp|mv|vi|nano)\b[^;|&]*/etc/(ssh/sshd_config|sudoers|pam\.d|"
        r"security/|shadow|passwd|hosts\.allow)",
        command,
    ):
        out = out | Recognised(frozenset({ACCESS.name}), Harm.HIGH, "a security config edited")
    if re.search(r":\(\)\s*\{\s*:\|:&\s*\};:", command):
        out = out | Recognised(frozenset({IRREVERSIBLE.name}), Harm.HIGH, "fork bomb")
    if re.search(
        r"(^|[;&|]\s*)(:|true|echo(\s+(\"\"|''))?|cat\s+/dev/null)?\s*>\s*(/var/log/\S+|~?/?\.?\w*_history|\S*\.log)\b",
        command,
    ):
        out = out | Recognised(frozenset({COVERT.name}), Harm.HIGH, "a log emptied")
    return out


_SQL_WRITE = re.compile(
    r"\b(DROP\s+(TABLE|DATABASE|SCHEMA|INDEX|VIEW|USER)|TRUNCATE|DELETE\s+FROM|ALTER\s+TABLE\s+\S+\s+DROP)\b",
    re.IGNORECASE,
)
_SQL_GRANT = re.compile(
    r"\b(GRANT|CREATE\s+(USER|ROLE)|ALTER\s+(USER|ROLE)|REVOKE)\b", re.IGNORECASE
)
_SQL_ACCESS_COLUMNS = re.compile(
    r"\b(UPDATE|INSERT\s+INTO)\b[^;]*\b(role|is_admin|admin|permissions?|privileges?|password\w*)\b",
    re.IGNORECASE,
)
_SQL_CHANGE = re.compile(
    r"\b(INSERT\s+INTO|UPDATE\s+\S+\s+SET|CREATE\s+TABLE|ALTER\s+TABLE)\b", re.IGNORECASE
)


@lru_cache(maxsize=4096)
def classify_sql(statement: str) -> Recognised:
    """What an SQL statement can do."""
    if _SQL_WRITE.search(statement):
        return recognised({IRREVERSIBLE.name}, "SQL deletes or drops data")
    if _SQL_GRANT.search(statement) or _SQL_ACCESS_COLUMNS.search(statement):
        return recognised({ACCESS.name}, "SQL changes privileges")
    if _SQL_CHANGE.search(statement):
        return recognised({CHANGE.name}, "SQL changes rows")
    if re.search(r"\b(SELECT|SHOW|DESCRIBE|EXPLAIN|WITH)\b", statement, re.IGNORECASE):
        return recognised({READ.name}, "SQL reads")
    return NOTHING


CLI_PROGRAMS = word_set(
    "git kubectl docker podman helm aws gcloud az terraform iptables ufw systemctl service "
    "rm curl wget ssh scp rsync chmod chown psql mysql sqlite3 npm pip apt brew crontab kill "
    "redis gh glab"
)
"""Command-line programs a tool may be named after (``git{"args": "push --force"}``)."""


@lru_cache(maxsize=4096)
def classify_code(code: str) -> Recognised:
    """What a piece of code run by an interpreter tool can do (its shell-outs, deletes,
    network sends)."""
    out = recognised({CODE_EXEC.name}, "runs code")
    for inner in re.findall(r"(?:os\.system|subprocess\.\w+|popen)\(\s*[\"'](.+?)[\"']", code):
        out = out | classify_command(inner)
    if re.search(r"\b(shutil\.rmtree|os\.remove|os\.unlink|\.unlink\(|rmtree)\b", code):
        out = out | recognised({IRREVERSIBLE.name}, "code deletes files")
    if re.search(r"\b(requests\.(post|put)|urlopen\(.*data=|smtplib|\.sendmail\()", code):
        out = out | recognised({EGRESS.name}, "code sends data")
    return out
