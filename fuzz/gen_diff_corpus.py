#!/usr/bin/env python3
"""Writes fuzz/corpus/diff/: seed inputs for fuzz_diff.

Layout (see fuzz_diff.c): byte 0 flags (1: no old side, 2: no new side,
4: new = old), byte 1 path length, bytes 2-3 old's length (little-endian),
then the path, old and new.

Usage: python3 fuzz/gen_diff_corpus.py [outdir]   (default fuzz/corpus/diff)"""
import os
import struct
import sys


def seed(flags, path, old, new):
    assert len(path) < 64
    return bytes([flags, len(path)]) + struct.pack("<H", len(old)) + path + old + new


def seeds():
    code_old = (b"def f(x):\n    return x + 1\n\n\ndef g():\n    pass\n"
                + b"".join(b"line %d\n" % i for i in range(20)))
    code_new = code_old.replace(b"x + 1", b"x + 2").replace(b"line 15\n", b"line 15 changed\nline 15b\n")
    return {
        "modify": seed(0, b"src/mod.py", code_old, code_new),
        "create": seed(1, b"new.txt", b"", b"hello\nworld\n"),
        "delete": seed(2, b"gone.txt", b"bye\n", b""),
        "same": seed(4, b"same.c", b"int x;\nint y;\n", b""),
        "no_newline_end": seed(0, b"a", b"a\nb", b"a\nc"),
        "add_newline_end": seed(0, b"a", b"a\nb", b"a\nb\n"),
        "empty_to_text": seed(0, b"e", b"", b"x\n"),
        "crlf": seed(0, b"win.txt", b"a\r\nb\r\n", b"a\r\nB\r\n"),
        "utf8": seed(0, "ü/ñ.txt".encode(), "héllo\n€\n".encode(), "héllo\n𝄞\n".encode()),
        "binaryish": seed(0, b"bin", b"\x00\x01\x02\n\xff\xfe\n", b"\x00\x01\x03\n\xff\xfe\n"),
        # a learner's path that tries to inject diff lines into the headers
        "path_newline": seed(0, b"x\n+++ b/evil\n@@ -1 +1 @@\n+fake", b"a\n", b"b\n"),
        "path_quote": seed(0, b"we ird\"\\\t.txt", b"a\n", b"b\n"),
        "invalid_utf8_path": seed(0, b"\xc3\x28.txt", b"a\n", b"b\n"),
        "many_hunks": seed(0, b"m", b"".join(b"%d\n" % i for i in range(60)),
                           b"".join((b"%d\n" % i) if i % 9 else b"X\n" for i in range(60))),
        # the whole input valid UTF-8 but for one surrogate (U+D800)
        "surrogate": seed(0, b"s", b"\xed\xa0\x80\n", b"x\n"),
        "utf8_edge": seed(0, b"u", b"\xed\x9f\xbf\n\xf4\x8f\xbf\xbf\n", b"\xed\xa0\x80\n\xf4\x90\x80\x80\n\xc0\xaf\n"),
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "diff")
    os.makedirs(outdir, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds()), outdir))


if __name__ == "__main__":
    main()
