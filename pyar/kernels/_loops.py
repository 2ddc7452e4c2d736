"""The reduction and conversion loops, written once and compiled for each target (host, CUDA,
the simulator).

Every loop visits ``range(start, n, stride)``: the host runs it with
``(0, 1)``, a CUDA thread with its grid index and the grid size (a grid-stride
loop). Ops are small integer codes; the branch on the code sits outside the
loops. Half-precision arrays arrive as their ``uint16`` bit patterns and go
through float32 (see :mod:`._half`).

Float results are commutative bit for bit: max prefers +0.0 and min -0.0 when
zeros of both signs meet, and every NaN result is the dtype's canonical quiet
NaN (a NaN's payload would otherwise be the first operand's).
"""

from types import SimpleNamespace

import numpy as np

from ._half import converters

SUM, PROD, MAX, MIN = range(4)


def loops(jit, device_jit, as_float, as_bits) -> SimpleNamespace:
    """The loops compiled with ``jit``; the scalar helpers they call with ``device_jit``."""
    f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16 = converters(device_jit, as_float, as_bits)

    @device_jit
    def canonical(r, nan):
        return r if r == r else nan

    @device_jit
    def maximum(x, y, nan):
        # Branch-free: a tie of zeros (x + y is +0.0 unless both are -0.0) and a NaN both go
        # through x + y.
        r = x if x > y else y
        r = x + y if (x == 0) & (y == 0) | (x != x) | (y != y) else r
        return r if r == r else nan

    @device_jit
    def minimum(x, y, nan):
        r = x if x < y else y
        r = -(-x - y) if (x == 0) & (y == 0) | (x != x) | (y != y) else r
        return r if r == r else nan

    @jit
    def fold_int(dst, src, op, start, stride):
        """``dst[i] = dst[i] op src[i]`` on integers, wrapping."""
        n = dst.size
        if op == SUM:
            for i in range(start, n, stride):
                dst[i] = dst[i] + src[i]
        elif op == PROD:
            for i in range(start, n, stride):
                dst[i] = dst[i] * src[i]
        elif op == MAX:
            for i in range(start, n, stride):
                dst[i] = max(dst[i], src[i])
        else:
            for i in range(start, n, stride):
                dst[i] = min(dst[i], src[i])

    @jit
    def fold_float(dst, src, op, nan, start, stride):
        """``dst[i] = dst[i] op src[i]`` on float32 or float64; ``nan`` is that dtype's NaN."""
        n = dst.size
        if op == SUM:
            for i in range(start, n, stride):
                dst[i] = canonical(dst[i] + src[i], nan)
        elif op == PROD:
            for i in range(start, n, stride):
                dst[i] = canonical(dst[i] * src[i], nan)
        elif op == MAX:
            for i in range(start, n, stride):
                dst[i] = maximum(dst[i], src[i], nan)
        else:
            for i in range(start, n, stride):
                dst[i] = minimum(dst[i], src[i], nan)

    def half(name, up, down):
        def fold(dst, src, op, start, stride):
            """``fold_float`` on half bit patterns (uint16 arrays), through float32."""
            n = dst.size
            nan = np.float32(np.nan)
            if op == SUM:
                for i in range(start, n, stride):
                    dst[i] = down(up(dst[i]) + up(src[i]))
            elif op == PROD:
                for i in range(start, n, stride):
                    dst[i] = down(up(dst[i]) * up(src[i]))
            elif op == MAX:
                for i in range(start, n, stride):
                    dst[i] = down(maximum(up(dst[i]), up(src[i]), nan))
            else:
                for i in range(start, n, stride):
                    dst[i] = down(minimum(up(dst[i]), up(src[i]), nan))

        def divide(dst, src, divisor, start, stride):
            """``dst[i] = src[i] / divisor`` on half bit patterns, through float32."""
            d = np.float32(divisor)
            for i in range(start, dst.size, stride):
                dst[i] = down(up(src[i]) / d)

        def widen(dst, src, start, stride):
            """``dst[i] = src[i]``: half bit patterns to float32 (exact)."""
            for i in range(start, dst.size, stride):
                dst[i] = up(src[i])

        def narrow(dst, src, start, stride):
            """``dst[i] = src[i]``: float32 to half bit patterns (nearest-even)."""
            for i in range(start, dst.size, stride):
                dst[i] = down(src[i])

        # Distinct names: Numba names compiled code by qualified name, types and a per-process
        # counter, so two closures of one name could clash when loaded from the cache together.
        for f in (fold, divide, widen, narrow):
            f.__name__ = f"{f.__name__}_{name}"
            f.__qualname__ = f"{f.__qualname__}_{name}"
        return jit(fold), jit(divide), jit(widen), jit(narrow)

    fold_f16, divide_f16, widen_f16, narrow_f16 = half("f16", f16_to_f32, f32_to_f16)
    fold_bf16, divide_bf16, widen_bf16, narrow_bf16 = half("bf16", bf16_to_f32, f32_to_bf16)

    @jit
    def divide_float(dst, src, divisor, start, stride):
        """``dst[i] = src[i] / divisor`` on float32 or float64 (``divisor`` of the same dtype)."""
        for i in range(start, dst.size, stride):
            dst[i] = src[i] / divisor

    return SimpleNamespace(fold_int=fold_int, fold_float=fold_float, fold_f16=fold_f16,
                           fold_bf16=fold_bf16, divide_f16=divide_f16, divide_bf16=divide_bf16,
                           divide_float=divide_float, widen_f16=widen_f16,
                           narrow_f16=narrow_f16, widen_bf16=widen_bf16,
                           narrow_bf16=narrow_bf16)
