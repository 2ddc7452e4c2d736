"""Half-precision bit conversions, written once for every target (host, CUDA, the simulator).

Numba has no float16/bfloat16 arithmetic, so half arrays are reduced as
``uint16`` bit patterns: widen both operands to float32 (exact), combine in
float32, round back to nearest-even. That is exactly what numpy (float16) and
ml_dtypes (bfloat16) compute, so results match theirs bit for bit, except that
every NaN result is the canonical quiet NaN (``0x7e00``, ``0x7fc0``): a NaN's
payload would otherwise depend on which operand came first.

:func:`converters` builds the four conversions for one target from that
target's ``jit`` decorator and its float32/uint32 bitcasts.
"""

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba.core import types

F16_NAN = 0x7E00
BF16_NAN = 0x7FC0


def bitcasts(intrinsic):
    """``as_float(u32) -> float32`` and ``as_bits(f32) -> uint32`` as Numba intrinsics (for
    the target ``intrinsic`` registers with): free reinterpretations, no memory round trip."""

    def as_float(typingctx, x):
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            word = builder.trunc(args[0], ir.IntType(32)) if x.bitwidth > 32 else (
                builder.zext(args[0], ir.IntType(32)) if x.bitwidth < 32 else args[0])
            return builder.bitcast(word, ir.FloatType())
        return types.float32(x), codegen

    def as_bits(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(32))
        return types.uint32(x), codegen

    return intrinsic(as_float), intrinsic(as_bits)


class Converters(NamedTuple):
    f16_to_f32: object      # uint16 bits -> float32 value (exact)
    f32_to_f16: object      # float32 value -> uint16 bits, nearest-even, canonical NaN
    bf16_to_f32: object
    f32_to_bf16: object


def converters(jit, as_float, as_bits) -> Converters:
    """The conversions compiled with ``jit``; ``as_float``/``as_bits`` reinterpret uint32 <-> float32."""
    u32, f32 = np.uint32, np.float32

    # Branch-free (every case computed, then selected) so that loops over them vectorize;
    # u32(...) around each result keeps Numba from widening the arithmetic to 64 bits.
    @jit
    def f16_to_f32(h):
        a = u32(u32(h) & u32(0x7FFF))
        normal = u32(u32(a << u32(13)) + u32(0x38000000))       # rebias exponent 15 -> 127
        special = u32(normal + u32(0x38000000))                 # inf, NaN: exponent 255
        tiny = as_bits(f32(a) * f32(5.9604644775390625e-08))    # subnormal, zero: a * 2**-24
        bits = special if a >= u32(0x7C00) else normal if a >= u32(0x400) else tiny
        return as_float(u32(bits | u32(u32(u32(h) & u32(0x8000)) << u32(16))))

    @jit
    def f32_to_f16(x):
        bits = as_bits(x)
        a = u32(bits & u32(0x7FFFFFFF))
        r = u32(max(a, u32(0x38800000)) - u32(0x38000000))      # rebias, round 23 -> 10 bits
        normal = u32(u32(r + u32(0xFFF) + u32(u32(r >> u32(13)) & u32(1))) >> u32(13))
        tiny = u32(as_bits(as_float(a) + f32(0.5)) - u32(0x3F000000))  # round |x| * 2**24
        h = u32(0x7C00) if a >= u32(0x47800000) else normal if a >= u32(0x38800000) else tiny
        h = u32(h | u32(u32(bits >> u32(16)) & u32(0x8000)))
        return np.uint16(F16_NAN if a > u32(0x7F800000) else h)

    @jit
    def bf16_to_f32(h):
        return as_float(u32(u32(h) << u32(16)))

    @jit
    def f32_to_bf16(x):
        bits = as_bits(x)
        a = u32(bits & u32(0x7FFFFFFF))
        h = u32(u32(a + u32(0x7FFF) + u32(u32(a >> u32(16)) & u32(1))) >> u32(16))
        h = u32(h | u32(u32(bits >> u32(16)) & u32(0x8000)))
        return np.uint16(BF16_NAN if a > u32(0x7F800000) else h)

    return Converters(f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16)
