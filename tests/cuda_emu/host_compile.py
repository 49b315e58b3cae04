#!/usr/bin/env python3
"""Rewrites a .cu file into C++ a host compiler takes with tests/cuda_emu/cuda_emu.h included first:

  kernel<T><<<grid, block, smem, stream>>>(a, b);
    -> ::mt_emu::launch_kernel(::mt_emu::Config(grid, block, smem, stream), (const void*)&kernel<T>,
                               "kernel<T>", std::make_tuple(a, b), [](auto... v) { kernel<T>(v...); });
  (the arguments evaluated once, on the host, as CUDA does, and pointers among them checked to
  be device memory; the address is nullptr where smem is absent or 0)
  extern __shared__ __align__(16) float smem[];
    -> float* smem = static_cast<float*>(::mt_emu::dynamic_shared());
  __shared__ float red[32];
    -> auto& red = ::mt_emu::static_shared<float[32]>("file.cu:27");
  (each block gets its own, exactly sized and poisoned: ASan sees overruns, NaN shows reads
  before writes)
  __global__ void __launch_bounds__(256) kernel(...) {
    -> __global__ void kernel(...) { ::mt_emu::check_launch_bounds(256);
  (a block larger than the bound stops the process: a GPU refuses such a launch)

Everything else is kept, and so are the line numbers (a `#line` names the .cu file by its path
in the repository, so ccache's results do not depend on where the checkout is), so compiler
errors and sanitizer reports point into the original source.

Usage: host_compile.py IN.cu OUT.cc NAME (NAME: the .cu's path to print, e.g. kernels/cuda/x.cu)
"""
import re
import sys

STATIC_SHARED = re.compile(r"(?<!extern )__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:]*)\s+(\w+)\s*\[([^\]]+)\]\s*;")
SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:\s]*?)\s+(\w+)\s*\[\s*\]\s*;")


def callee_start(src, end):
    """Start of the kernel expression ending just before `end` (a name, maybe with <...> args)."""
    i = end
    while i > 0 and src[i - 1].isspace():
        i -= 1
    if src[i - 1] == ">":
        depth = 0
        while i > 0:
            i -= 1
            if src[i] == ">":
                depth += 1
            elif src[i] == "<":
                depth -= 1
                if depth == 0:
                    break
    while i > 0 and (src[i - 1].isalnum() or src[i - 1] in "_:"):
        i -= 1
    return i


def closing_paren(src, open_at):
    depth = 0
    for i in range(open_at, len(src)):
        if src[i] == "(":
            depth += 1
        elif src[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit("unbalanced parentheses after a launch")


def top_level_split(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def flat(text):
    return " ".join(text.split())


def rewrite_launches(src):
    out, pos = [], 0
    while True:
        at = src.find("<<<", pos)
        if at < 0:
            out.append(src[pos:])
            return "".join(out)
        start = callee_start(src, at)
        callee = src[start:at]
        close = src.find(">>>", at)
        config = src[at + 3 : close]
        open_paren = src.index("(", close)
        end = closing_paren(src, open_paren)
        args = src[open_paren + 1 : end]
        name = flat(callee)
        lost = callee.count("\n") + config.count("\n") + src[close:open_paren].count("\n")
        out.append(src[pos:start])
        # The kernel's address keys its shared-memory attribute; only launches with dynamic shared
        # memory need it (and a template deduced from the call's arguments has no address to take).
        smem = top_level_split(config)[2].strip() if len(top_level_split(config)) > 2 else "0"
        address = "nullptr" if smem == "0" else f"(const void*)&{name}"
        out.append(
            f'::mt_emu::launch_kernel(::mt_emu::Config({flat(config)}), {address}, "{name}", '
            f"std::make_tuple({args}), [](auto... v) {{ {name}(v...); }})" + "\n" * lost
        )
        pos = end + 1


LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\(((?:[^()]|\([^()]*\))*)\)(\s*\w+\s*)\(")


def rewrite_launch_bounds(src):
    """`__launch_bounds__(N, ...) kernel(params) {` -> `kernel(params) { check(N);` on the same
    lines: a launch with more threads per block than N stops (a GPU refuses it)."""
    out, pos = [], 0
    for m in LAUNCH_BOUNDS.finditer(src):
        bound = top_level_split(m.group(1))[0]
        params_end = closing_paren(src, m.end() - 1)
        body = src.index("{", params_end)
        out.append(src[pos : m.start()] + " " * len("__launch_bounds__") + m.group(2) + "(")
        out.append(src[m.end() : body + 1] + f" ::mt_emu::check_launch_bounds({bound});")
        pos = body + 1
    out.append(src[pos:])
    return "".join(out)


def rewrite_static_shared(src, name):
    def one(m):
        line = src.count("\n", 0, m.start()) + 1
        return f'auto& {m.group(2)} = ::mt_emu::static_shared<{m.group(1)}[{m.group(3)}]>("{name}:{line}");'
    return STATIC_SHARED.sub(one, src)


def main():
    src_path, out_path, name = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(src_path) as f:
        src = f.read()
    src = rewrite_launch_bounds(src)
    src = rewrite_static_shared(src, name)
    src = SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = static_cast<{m.group(1)}*>(::mt_emu::dynamic_shared());", src)
    src = rewrite_launches(src)
    with open(out_path, "w") as f:
        f.write(f'#line 1 "{name}"\n#include <tuple>\n#line 1 "{name}"\n' + src)


if __name__ == "__main__":
    main()
