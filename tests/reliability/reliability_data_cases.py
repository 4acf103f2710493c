"""Hostile data files: every reader's layout with a user's or an attacker's mistakes in it,
special files where a data file belongs, and damaged archives (read by ``attnsvm data stats`` or
``attnsvm data prepare``).

Each clean layout below reads to the same 3 users, 3 items and 6 events; the legitimate variants
(CRLF, a BOM, blank lines, negative times) must read to exactly that, and every malformed one
must be refused naming the file (and the line, where there is one)."""

from __future__ import annotations

import gzip
import os
import re
import zipfile

from reliability_harness import Case, accepted, refused

from attnsvm.rec.data._tokens import MAX_ID_LENGTH

LAYOUTS = {  # file name → a clean file of 3 users, 3 items, 6 events
    "ratings.dat": "1::10::5::978300760\n1::11::4::978300761\n2::10::3::978300762\n"
    "2::12::3::978300763\n3::11::1::978300764\n3::12::2::978300765\n",
    "u.data": "1\t10\t5\t881250949\n1\t11\t4\t881250950\n2\t10\t3\t881250951\n"
    "2\t12\t3\t881250952\n3\t11\t1\t881250953\n3\t12\t2\t881250954\n",
    "ratings.csv": "userId,movieId,rating,timestamp\n1,10,4.0,964982703\n1,11,4.0,964982704\n"
    "2,10,3.5,964982705\n2,12,3.0,964982706\n3,11,1.0,964982707\n3,12,2.0,964982708\n",
    "seq.txt": "1 10 11\n2 10 12\n3 11 12\n",
    "pairs.txt": "1 10\n1 11\n2 10\n2 12\n3 11\n3 12\n",
    "log.inter": "user_id:token\titem_id:token\ttimestamp:float\n1\t10\t5\n1\t11\t6\n2\t10\t7\n"
    "2\t12\t8\n3\t11\t9\n3\t12\t10\n",
    "clicks.tsv": "SessionId\tItemId\tTime\n1\t10\t5\n1\t11\t6\n2\t10\t7\n2\t12\t8\n3\t11\t9\n"
    "3\t12\t10\n",
}
HEADED = {"ratings.csv", "log.inter", "clicks.tsv"}
TIMED = {"ratings.dat", "u.data", "ratings.csv", "clicks.tsv", "log.inter"}
SEPARATOR = {"ratings.dat": "::", "u.data": "\t", "ratings.csv": ",", "seq.txt": " ",
             "pairs.txt": " ", "log.inter": "\t", "clicks.tsv": "\t"}  # fmt: skip


def _stats(workspace, name: str, data: bytes | str) -> list[str]:
    return ["data", "stats", str(workspace.file(name, data))]


def _same_table(workspace, output: str) -> None:
    """The statistics of the clean file: 3 users, 3 items, 6 events."""
    for label, value in (("users", 3), ("items", 3), ("interactions", 6)):
        assert re.search(rf"\b{label}\b\W+{value}\b", output), output


def _replace_line(text: str, index: int, line: str) -> str:
    lines = text.split("\n")
    lines[index] = line
    return "\n".join(lines)


def _with_field(name: str, text: str, column: int, value: str) -> str:
    """The clean file with one field of its second data line replaced."""
    lines = text.split("\n")
    row = 2 if name in HEADED else 1
    fields = lines[row].split(SEPARATOR[name])
    fields[column] = value
    lines[row] = SEPARATOR[name].join(fields)
    return "\n".join(lines)


def _bad_line(name: str) -> str:
    return rf"{name}:{3 if name in HEADED else 2}: "


def _counts(users: int, items: int, events: int):
    def check(workspace, output: str) -> None:
        for label, value in (("users", users), ("items", items), ("interactions", events)):
            assert re.search(rf"\b{label}\b\W+{value}\b", output), output

    return check


# (case, the id written, the column, what the message says of it): refused in a layout of
# integer ids; a RecBole file's ids are free tokens, so there each is a new, legitimate id
ODD_IDS = (
    ("a letter for an item id", "abc", 1, "'abc' is not an integer"),
    ("ids beyond 64 bits", "9" * 30, 0, "out of the 64-bit integer range"),
    ("a 10-million-digit id (the message cuts it)", "7" * 10_000_000, 0,
     r"'7{39}…7{19}' \(10,000,000 characters\) is out of the 64-bit integer range"),
    ("Arabic-Indic digits (int() reads them; they would merge with ASCII ids)", "١٠", 1,
     "'١٠' is not an integer"),
    ("an underscore in an id (int() reads 1_0 as 10)", "1_0", 1, "'1_0' is not an integer"),
    ("a leading + on a user id (int() reads +1 as user 1)", "+1", 0,
     r"'\+1' is not an integer: ids are ASCII digits"),
    ("full-width digits in an id (int() reads them)", "１０", 1, "'１０' is not an integer"),
    ("rich markup as an id (printed as text)", "[/bogus][bold]x", 1,
     r"'\[/bogus\]\[bold\]x' is not an integer"),
    ("a terminal escape sequence as an id (shown escaped)", "\x1b[2J\x1b[31m7", 1,
     r"'\\x1b\[2J\\x1b\[31m7' is not an integer"),
)  # fmt: skip
_ASCII_ONLY = "is not a number: numbers are written in ASCII"
# (a time, what the message says of it): float() reads the last three, the readers do not
ODD_TIMES = (("nan", "is not finite"), ("inf", "is not finite"), ("-inf", "is not finite"),
             ("soon", "is not a number"), ("1_0", _ASCII_ONLY), ("١٠", _ASCII_ONLY),
             ("１０", _ASCII_ONLY))  # fmt: skip


def _id_cases(name: str, clean: str, where: str) -> list[Case]:
    cases = []
    for title, value, column, problem in ODD_IDS:

        def build(w, v=value, c=column):
            return _stats(w, name, _with_field(name, clean, c, v))

        if name == "log.inter" and len(value) > MAX_ID_LENGTH:
            pattern = where + rf".* \(10,000,000 characters\) is over {MAX_ID_LENGTH:,} characters"
            cases.append(refused(f"{name}: {title}", "data file: values", build, pattern))
        elif name == "log.inter":  # a new user (column 0) or item (column 1): 4 of them
            check = _counts(4, 3, 6) if column == 0 else _counts(3, 4, 6)
            cases.append(accepted(f"{name}: {title}", "data file: values", build, check))
        else:
            pattern = where + ".*" + problem
            cases.append(refused(f"{name}: {title}", "data file: values", build, pattern))
    return cases


def _layout_cases(name: str, clean: str) -> list[Case]:
    kind_structure, kind_values, kind_encoding = (
        "data file: structure",
        "data file: values",
        "data file: encoding or kind",
    )
    where = _bad_line(name)
    item = 1  # the item column, in every layout
    cases = [
        refused(f"{name}: empty", kind_structure, lambda w: _stats(w, name, b""), "is empty"),
        refused(
            f"{name}: only blanks",
            kind_structure,
            lambda w: _stats(w, name, " \n\t\n\n"),
            rf"{name}: is empty",
        ),
        refused(
            f"{name}: an extra field",
            kind_structure,
            lambda w: _stats(w, name, _with_field(name, clean, item, f"10{SEPARATOR[name]}x")),
            where if name != "seq.txt" else "is not an integer",
        ),
        *_id_cases(name, clean, where),
        refused(
            f"{name}: a 30 MB line (the message cuts it)",
            kind_structure,
            lambda w: _stats(w, name, _with_field(name, clean, item, "z" * 30_000_000)),
            rf"{where}.*\(30,000,000 characters\)",
        ),
        refused(
            f"{name}: UTF-16 with its BOM (a Windows export)",
            kind_encoding,
            lambda w: _stats(w, name, clean.encode("utf-16")),
            rf"{name}: is UTF-16 text: save it as UTF-8",
        ),
        refused(
            f"{name}: UTF-16 without a BOM",
            kind_encoding,
            lambda w: _stats(w, name, clean.encode("utf-16-le")),
            rf"{name}:1: holds NUL bytes",
        ),
        refused(
            f"{name}: gzip-compressed",
            kind_encoding,
            lambda w: _stats(w, name, gzip.compress(clean.encode(), mtime=0)),
            rf"{name}: is gzip-compressed",
        ),
        refused(
            f"{name}: an Excel .xlsx saved under the name",
            kind_encoding,
            lambda w: _stats(w, name, b"PK\x03\x04\x14\x00\x06\x00" + os.urandom(64)),
            rf"{name}: is a zip archive \(or an Excel .xlsx workbook\)",
        ),
        refused(
            f"{name}: an Excel .xls saved under the name",
            kind_encoding,
            lambda w: _stats(w, name, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256))),
            rf"{name}: is an Excel .xls workbook",
        ),
        refused(
            f"{name}: Latin-1 bytes",
            kind_encoding,
            lambda w: _stats(w, name, _with_field(name, clean, item, "caf\xe9").encode("latin-1")),
            rf"{where}is not valid UTF-8 \(byte 0xe9",
        ),
        refused(
            f"{name}: random binary",
            kind_encoding,
            lambda w: _stats(w, name, bytes(range(128, 256)) * 8),
            rf"{name}(:1)?: ",
        ),
        accepted(
            f"{name}: CRLF line ends",
            kind_encoding,
            lambda w: _stats(w, name, clean.replace("\n", "\r\n")),
            _same_table,
        ),
        accepted(
            f"{name}: a UTF-8 BOM",
            kind_encoding,
            lambda w: _stats(w, name, "\ufeff" + clean),
            _same_table,
        ),
        accepted(
            f"{name}: blank lines between and after",
            kind_structure,
            lambda w: _stats(w, name, clean.replace("\n", "\n\n", 2) + "\n\n"),
            _same_table,
        ),
    ]
    if name not in ("seq.txt", "pairs.txt"):  # the whitespace layouts take any blank run
        cases.append(
            refused(
                f"{name}: a missing field",
                kind_structure,
                lambda w: _stats(w, name, _replace_line(clean, 2 if name in HEADED else 1, "1")),
                rf"{where}expected \d+ fields",
            )
        )
    if name in TIMED:
        time = 3 if name in ("ratings.dat", "u.data", "ratings.csv") else 2
        for value, problem in ODD_TIMES:
            cases.append(
                refused(
                    f"{name}: {value} for a time",
                    kind_values,
                    lambda w, value=value: _stats(w, name, _with_field(name, clean, time, value)),
                    rf"{where}timestamp '{value}' {problem}",
                )
            )
        cases.append(
            accepted(
                f"{name}: a negative time (before 1970)",
                kind_values,
                lambda w: _stats(w, name, _with_field(name, clean, time, "-5")),
                _same_table,
            )
        )
    if name not in HEADED:
        words = ["user", "item", "rating", "time"] if name in TIMED else ["user", "item"]
        header = SEPARATOR[name].join(words)
        cases.append(
            refused(
                f"{name}: a header line where the layout has none",
                kind_structure,
                lambda w: _stats(w, name, header + "\n" + clean),
                rf"{name}:1: .*looks like a header",
            )
        )
    else:
        cases.append(
            refused(
                f"{name}: only its header",
                kind_structure,
                lambda w: _stats(w, name, clean.split("\n")[0] + "\n"),
                rf"{name}: has no data lines|{name}:1: ",
            )
        )
    return cases


def _fifo(workspace, name: str):
    path = workspace.root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _zip(workspace, name: str, members: dict[str, bytes]):
    path = workspace.root / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return path


def _zipped(workspace, udata: bytes) -> bytes:
    return _zip(workspace, "full.zip", {"ml-100k/u.data": udata}).read_bytes()


def _prepare(source) -> list[str]:
    return ["data", "prepare", "ml-100k", "--from", str(source), "--no-verify",
            "--cache-dir", str(source.parent / "cache")]  # fmt: skip


def _corrupt_member(workspace):
    path = _zip(workspace, "ml-100k.zip", {"ml-100k/u.data": LAYOUTS["u.data"].encode() * 50})
    data = bytearray(path.read_bytes())
    data[60:70] = b"\x00" * 10  # inside the deflated member: its CRC-32 no longer matches
    path.write_bytes(bytes(data))
    return _prepare(path)


def _encrypted_member(workspace):
    path = _zip(workspace, "ml-100k.zip", {"ml-100k/u.data": LAYOUTS["u.data"].encode()})
    data = bytearray(path.read_bytes())
    data[6] |= 1  # the encryption flag, in the local header and in the central directory
    central = data.rfind(b"PK\x01\x02")
    data[central + 8] |= 1
    path.write_bytes(bytes(data))
    return _prepare(path)


def _zip_bomb(workspace):
    path = _zip(workspace, "ml-100k.zip", {"ml-100k/u.data": LAYOUTS["u.data"].encode()})
    data = bytearray(path.read_bytes())
    central = data.rfind(b"PK\x01\x02")
    data[central + 24 : central + 28] = (2**32 - 16).to_bytes(4, "little")  # claims 4 GiB
    path.write_bytes(bytes(data))
    return _prepare(path)


def _special_cases() -> list[Case]:
    special, archive = "special file", "archive"
    udata = LAYOUTS["u.data"].encode()
    return [
        refused("a named pipe as the data file", special,
                lambda w: ["data", "stats", str(_fifo(w, "pipe.txt"))],
                r"pipe.txt: is a named pipe \(FIFO\), not a regular file"),
        refused("a named pipe as u.data in a dataset folder", special,
                lambda w: _prepare_folder(w, fifo=True), r"u.data: is a named pipe"),
        refused("a directory named u.data in a dataset folder", special,
                lambda w: _prepare_folder(w, fifo=False), r"u.data: is a directory"),
        refused("a directory as the data file", special,
                lambda w: ["data", "stats", str(_directory(w, "seq.dat"))],
                r"seq.dat: is a directory, not a regular file"),
        refused("a character device as the data file", special,
                lambda w: ["data", "stats", "/dev/zero"], r"/dev/zero: is a character device"),
        refused("a symbolic link loop as the data file", special,
                lambda w: ["data", "stats", str(_loop(w))], r"loop.txt: "),
        refused("a named pipe as the config file", special,
                lambda w: ["train", "--config", str(_fifo(w, "run.toml"))],
                r"run.toml: cannot read config \(is a named pipe"),
        refused("a truncated zip", archive,
                lambda w: _prepare(w.file("ml-100k.zip", _zipped(w, udata)[:-30])),
                r"ml-100k.zip: is a damaged zip archive \(.*\): it is corrupt or cut short; "
                r"download or copy it again"),
        refused("an empty file named .zip", archive,
                lambda w: _prepare(w.file("ml-100k.zip", b"")),
                r"ml-100k.zip: is empty: give the archive as published, or the data file itself"),
        refused("a zip whose member is corrupt (CRC)", archive, _corrupt_member,
                r"ml-100k.zip:ml-100k/u.data: is damaged inside the archive \(.*\): the "
                r"archive is corrupt or cut short; download or copy it again"),
        refused("a zip whose member is encrypted", archive, _encrypted_member,
                r"ml-100k.zip:ml-100k/u.data: is encrypted"),
        refused("a zip member claiming 4 GiB (a zip bomb)", archive, _zip_bomb,
                r"u.data: would expand to 4,294,967,280 bytes"),
        refused("a zip without the dataset's file", archive,
                lambda w: _prepare(_zip(w, "ml-100k.zip", {"README": b"hi"})),
                r"ml-100k.zip: holds none of the ml-100k files \(u.data\); it holds 'README': "
                r"give the ml-100k archive as published, or one of its files itself"),
        refused("a zip with u.data as a folder only", archive,
                lambda w: _prepare(_zip(w, "ml-100k.zip", {"ml-100k/u.data/": b""})),
                r"ml-100k.zip: holds none of the ml-100k files \(u.data\); it holds no file: give"),
        refused("a zip whose u.data is malformed", archive,
                lambda w: _prepare(_zip(w, "ml-100k.zip", {"ml-100k/u.data": b"1\t2\n"})),
                r"ml-100k.zip:ml-100k/u.data:1: expected 4 fields"),
        accepted("a zip of a good u.data (nested folder)", archive,
                 lambda w: _prepare(_zip(w, "ml-100k.zip", {"x/ml-100k/u.data": udata * 20})),
                 _prepared),
        accepted("a zip under another name (.xlsx), read by its content", archive,
                 lambda w: _prepare(_zip(w, "u.xlsx", {"u.data": udata * 20})), _prepared),
        refused("a file named like the zip, but text", archive,
                lambda w: _prepare(w.file("ml-100k.zip", udata)),
                r"ml-100k.zip: is not a zip archive \(it holds no zip record\): give the archive"),
    ]  # fmt: skip


def _prepared(workspace, output: str) -> None:
    assert "prepared ml-100k" in output, output[-500:]


def _prepare_folder(workspace, *, fifo: bool) -> list[str]:
    folder = workspace.root / "raw" / "ml-100k"
    folder.mkdir(parents=True)
    if fifo:
        os.mkfifo(folder / "u.data")
    else:
        (folder / "u.data").mkdir()
    return _prepare(folder)


def _directory(workspace, name: str):
    path = workspace.root / name
    path.mkdir()
    return path


def _loop(workspace):
    path = workspace.root / "loop.txt"
    os.symlink(path, path)
    return path


def data_cases() -> list[Case]:
    cases = [case for name, clean in LAYOUTS.items() for case in _layout_cases(name, clean)]
    return cases + _special_cases()
