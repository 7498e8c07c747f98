#!/usr/bin/env python3
"""Checks that a PNG screenshot is not blank: decodes it with the standard library (zlib) and
counts distinct colours. Usage: png_check.py FILE MIN_BYTES MIN_COLOURS. Exit 0 when the file is
at least MIN_BYTES and shows at least MIN_COLOURS colours; prints what it found either way."""
import struct
import sys
import zlib


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def colours(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, depth, ctype = 8, b"", 0, 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    channels = {2: 3, 6: 4, 0: 1, 4: 2}.get(ctype)
    if depth != 8 or channels is None:
        raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype})")
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    seen = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 0xFF
            elif f == 4:
                line[i] = (line[i] + paeth(a, b, c)) & 0xFF
        if y % 4 == 0:  # every 4th row is plenty to tell a page from a blank
            for x in range(0, stride, channels * 2):
                seen.add(bytes(line[x:x + channels]))
        prev = line
    return width, height, len(seen)


def main():
    path, min_bytes, min_colours = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    size = len(open(path, "rb").read())
    width, height, n = colours(path)
    print(f"{path}: {size} bytes, {width}x{height}, {n} distinct colours (sampled)")
    if size < min_bytes or n < min_colours:
        print(f"FAIL: want at least {min_bytes} bytes and {min_colours} colours")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
