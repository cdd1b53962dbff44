#!/usr/bin/env python3
"""Prints facts about WebAssembly core modules as JSON: size in bytes, defined and imported
functions, tags (exception handling), whether a name section is present, and the custom
sections. Reads only the section headers and the counts at the start of each section.

Usage: wasm_info.py MODULE.wasm [...]   (one JSON object per line)
"""
import json
import os
import sys

SECTION_IMPORT, SECTION_FUNCTION, SECTION_CUSTOM, SECTION_TAG = 2, 3, 0, 13


def leb_u(data, pos):
    """An unsigned LEB128 number at pos: (value, position after it)."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def name_at(data, pos):
    length, pos = leb_u(data, pos)
    return data[pos:pos + length].decode("utf-8", "replace"), pos + length


def skip_limits(data, pos):
    flags = data[pos]
    pos += 1
    _, pos = leb_u(data, pos)
    if flags & 1:
        _, pos = leb_u(data, pos)
    return pos


def skip_valtype(data, pos):
    """A value type: one byte, or a reference type with a heap type after it."""
    byte = data[pos]
    pos += 1
    if byte in (0x63, 0x64):  # (ref null ht), (ref ht)
        _, pos = leb_u(data, pos)  # heap types here are small (abstract or type indices)
    return pos


def count_imports(data, pos):
    """(imported functions, imported tags) of an import section's body."""
    count, pos = leb_u(data, pos)
    funcs = tags = 0
    for _ in range(count):
        _, pos = name_at(data, pos)
        _, pos = name_at(data, pos)
        kind = data[pos]
        pos += 1
        if kind == 0:  # function: type index
            funcs += 1
            _, pos = leb_u(data, pos)
        elif kind == 1:  # table: reftype + limits
            pos = skip_valtype(data, pos)
            pos = skip_limits(data, pos)
        elif kind == 2:  # memory: limits
            pos = skip_limits(data, pos)
        elif kind == 3:  # global: valtype + mutability
            pos = skip_valtype(data, pos)
            pos += 1
        elif kind == 4:  # tag: attribute + type index
            tags += 1
            pos += 1
            _, pos = leb_u(data, pos)
        else:
            raise ValueError(f"unknown import kind {kind}")
    return funcs, tags


def info(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\0asm":
        raise ValueError(f"{path}: not a wasm module")
    if data[4:8] != b"\x01\0\0\0":
        raise ValueError(f"{path}: not a core module (a component?)")
    out = {"file": path, "bytes": len(data), "functions": 0, "imported_functions": 0,
           "tags": 0, "name_section": False, "custom_sections": []}
    pos = 8
    while pos < len(data):
        sid = data[pos]
        size, body = leb_u(data, pos + 1)
        end = body + size
        if sid == SECTION_CUSTOM:
            name, _ = name_at(data, body)
            out["custom_sections"].append(name)
            if name == "name":
                out["name_section"] = True
        elif sid == SECTION_IMPORT:
            funcs, tags = count_imports(data, body)
            out["imported_functions"] += funcs
            out["tags"] += tags
        elif sid == SECTION_FUNCTION:
            out["functions"], _ = leb_u(data, body)
        elif sid == SECTION_TAG:
            tags, _ = leb_u(data, body)
            out["tags"] += tags
        pos = end
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip())
    for path in sys.argv[1:]:
        print(json.dumps(info(path)))


if __name__ == "__main__":
    main()
