#!/usr/bin/env python3
"""Writes fuzz/corpus/spool/: seed inputs for fuzz_spool.

Random bytes almost never carry a record whose CRC32C holds, so without
seeds the fuzzer never gets past the recovery's "bad record" path. Each
seed is fuzz_spool's input layout (see fuzz_spool.c):

    byte 0   flags: 1 = split the rest into seg-0 and seg-7 at byte 1's
             fraction (size * b1 / 256); 2 = write an ack file for b1 - 1
    byte 1   b1
    rest     segment bytes: records as spool.h describes them
             (24-byte LE header "SGR1" | u32 len | i64 seq | u32 0 |
             u32 CRC32C(header[0:20] + payload), then the payload)

Usage: python3 fuzz/gen_spool_corpus.py [outdir]   (default fuzz/corpus/spool)
Deterministic: rerunning it rewrites the same files."""
import os
import struct
import sys


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# The check value of CRC-32C ("123456789"), so a wrong table cannot pass.
assert crc32c(b"123456789") == 0xE3069283


def record(seq, payload, reserved=0):
    head = b"SGR1" + struct.pack("<IqI", len(payload), seq, reserved)
    return head + struct.pack("<I", crc32c(head + payload)) + payload


def frame(seq, kind="run_result", pad=0):
    """A wire frame as the capture spools it (its content does not matter to
    the spool, but keeps the seeds realistic)."""
    body = ('{"seq":%d,"kind":"%s","ts":"2026-01-01T00:00:%02d.000Z","payload":'
            '{"cmd":"pytest -q","exit_code":0,"out":"%s"}}'
            % (seq, kind, seq % 60, "x" * pad))
    return body.encode()


def recs(seqs, pad=0):
    return b"".join(record(s, frame(s, pad=pad)) for s in seqs)


def seed(flags, b1, body):
    return bytes([flags, b1]) + body


def seeds():
    out = {}
    out["clean5"] = seed(0, 0, recs(range(5)))
    out["clean5_ack2"] = seed(2, 3, recs(range(5)))
    out["ack_all"] = seed(2, 5, recs(range(5)))
    out["ack_beyond"] = seed(2, 200, recs(range(3)))
    out["empty_ack"] = seed(2, 10, b"")
    out["one_empty_payload"] = seed(0, 0, record(0, b""))
    whole = recs(range(5))
    out["torn_tail"] = seed(0, 0, whole + record(5, frame(5))[:30])
    out["torn_header"] = seed(0, 0, whole + record(5, frame(5))[:10])
    bad = bytearray(recs(range(6)))
    r0 = len(recs(range(2)))  # start of seq 2
    bad[r0 + 24 + 5] ^= 0x40  # a payload byte of seq 2: its CRC fails
    out["corrupt_middle"] = seed(0, 0, bytes(bad))
    bad_hdr = bytearray(recs(range(4)))
    bad_hdr[len(recs(range(1))) + 4] ^= 0x01  # seq 1's length
    out["corrupt_length"] = seed(0, 0, bytes(bad_hdr))
    out["garbage_between"] = seed(0, 0, recs(range(3)) + b"\x00garbage SGR1 not a record\xff" * 3
                                  + recs(range(3, 6)))
    out["gap"] = seed(0, 0, recs([0, 1, 2, 5, 6]))
    out["gap_too_large"] = seed(0, 0, recs([0, 1]) + record(1 << 40, frame(9)) + recs([2]))
    out["duplicate_seq"] = seed(0, 0, recs([0, 1, 1, 2]))
    out["backwards_seq"] = seed(0, 0, recs([0, 1, 3, 2, 4]))
    out["starts_late"] = seed(0, 0, recs(range(7, 12)))
    out["reserved_set"] = seed(0, 0, recs([0]) + record(1, frame(1), reserved=1) + recs([2]))
    out["negative_seq"] = seed(0, 0, recs([0]) + record(-5, frame(1)) + recs([1]))
    # Two segments, seg-0 with seqs 0..6 and seg-7 with 7..13, cut exactly at
    # their boundary: equal halves and b1 = 128.
    second = recs(range(7, 14))
    first = recs(range(6))
    first += record(6, frame(6, pad=len(second) - len(first) - len(record(6, frame(6)))))
    assert len(first) == len(second)
    out["two_segments"] = seed(1, 128, first + second)
    out["two_segments_ack"] = seed(3, 128, first + second)
    out["two_segments_torn"] = seed(1, 128, first + second[:-7])
    out["two_segments_overlap"] = seed(1, 128, recs(range(7)) + recs(range(3, 10)))
    out["big_payloads"] = seed(0, 0, recs(range(3), pad=3000))
    # Blob records (type 1) before their event, and after the last event
    # (a crash between a file's content and its file_diff): dropped at
    # recovery, whichever segment holds them.
    def blob(seq, n=40):
        return record(seq, b'{"blob":"content","part":"' + b"y" * n + b'"}', reserved=1)
    with_blobs = recs([0]) + blob(1) + blob(1) + recs([1])
    out["blobs_with_event"] = seed(0, 0, with_blobs)
    out["blobs_after_last"] = seed(0, 0, with_blobs + blob(2) + blob(2, 300))
    out["blobs_after_last_torn"] = seed(0, 0, with_blobs + blob(2) + blob(2)[:20])
    out["blobs_after_last_ack"] = seed(2, 2, with_blobs + blob(2))
    # Two segments, equal halves (b1 = 128): seg-0 ends with blobs, seg-7 is
    # a torn record (cut off: seg-0 becomes the tail), or blobs only.
    tail0 = with_blobs + blob(2) + blob(2)
    out["blobs_tail_then_torn_segment"] = seed(1, 128, tail0 + blob(2, 2 * len(tail0))[:len(tail0)])
    only = blob(2) + blob(2, len(tail0) - 2 * len(blob(2)) + 40)
    assert len(only) == len(tail0)
    out["blobs_tail_then_blob_segment"] = seed(1, 128, tail0 + only)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "spool")
    os.makedirs(outdir, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
    print("%d seeds in %s" % (len(seeds()), outdir))


if __name__ == "__main__":
    main()
