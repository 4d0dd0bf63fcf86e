"""The IR layer the gfx950 kernel is written in (kernel/flydsl/gfx950.py): flydsl (0.4.x)
imported on first use (`require_flydsl`), MLIR types, `V` (an SSA scalar with Python operators),
constants, vectors, LDS and global memory, waits and barriers, loops and conditionals, a software
pipeline, lane exchange, and the conversions, MFMAs and transcendentals the kernel uses (each
names the gfx950 instruction it stands for).

Every helper builds MLIR at the current insertion point (the kernel being traced); nothing here
knows the kernel's algorithm or layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# flydsl modules, bound by require_flydsl() on the first build (importing this module needs no flydsl).
flyc: Any = None
fx: Any = None
ir: Any = None
arith: Any = None
llvm: Any = None
rocdl: Any = None
scf: Any = None
vector: Any = None
as_ir_value: Any = None


def require_flydsl() -> None:
    """Import flydsl (0.4.x) on first use; ImportError when it is not installed."""
    global flyc, fx, ir, arith, llvm, rocdl, scf, vector, as_ir_value
    if ir is not None:
        return
    import flydsl.compiler as _flyc
    import flydsl.expr as _fx
    from flydsl._mlir import ir as _ir
    from flydsl._mlir.dialects import arith as _arith
    from flydsl._mlir.dialects import llvm as _llvm
    from flydsl._mlir.dialects import rocdl as _rocdl
    from flydsl._mlir.dialects import scf as _scf
    from flydsl._mlir.dialects import vector as _vector
    from flydsl.expr.typing import as_ir_value as _as_ir_value

    flyc, fx, ir, arith, llvm = _flyc, _fx, _ir, _arith, _llvm
    rocdl, scf, vector, as_ir_value = _rocdl, _scf, _vector, _as_ir_value


FLYDSL_NAMES = ("flyc", "fx", "ir", "arith", "llvm", "rocdl", "scf", "vector", "as_ir_value")


def flydsl_modules() -> dict[str, Any]:
    """{name: module} of the flydsl handles above (FLYDSL_NAMES), imported (require_flydsl)."""
    require_flydsl()
    return {name: globals()[name] for name in FLYDSL_NAMES}


# ================================================================ types, scalars, memory, control flow
# Every helper below builds MLIR at the current insertion point (the kernel being traced).


def _i16() -> ir.Type:
    return ir.IntegerType.get_signless(16)


def _i32() -> ir.Type:
    return ir.IntegerType.get_signless(32)


def _i64() -> ir.Type:
    return ir.IntegerType.get_signless(64)


def _f32() -> ir.Type:
    return ir.F32Type.get()


def _f16() -> ir.Type:
    return ir.F16Type.get()


def _bf16() -> ir.Type:
    return ir.BF16Type.get()


def _vec(n: int, elem: ir.Type) -> ir.Type:
    return ir.VectorType.get([n], elem)


_NO_WRAP = [False]


class no_wrap:
    """Context in which i32 add/mul/shl carry nsw+nuw: used for LDS byte addresses (small and
    non-negative), so the backend may fold constant parts into the DS instruction offset."""

    def __enter__(self) -> None:
        self._saved = _NO_WRAP[0]
        _NO_WRAP[0] = True

    def __exit__(self, *exc: object) -> None:
        _NO_WRAP[0] = self._saved


class V:
    """An SSA scalar (i1/i32/i64/f32) with the operators this kernel needs.

    Integer arithmetic wraps; `>>` is a logical shift; comparisons are signed for integers and
    ordered for floats; Python numbers are materialized as constants of the other operand's type.
    """

    __slots__ = ("v",)

    def __init__(self, value: ir.Value | V) -> None:
        self.v = value.v if isinstance(value, V) else value

    @property
    def type(self) -> ir.Type:
        return self.v.type

    @property
    def is_float(self) -> bool:
        return self.v.type == ir.F32Type.get()

    def _other(self, other: object) -> ir.Value:
        if isinstance(other, V):
            return other.v
        if isinstance(other, ir.Value):
            return other
        if self.is_float:
            return arith.constant(self.type, float(other))
        width = ir.IntegerType(self.type).width
        value = int(other)
        if value >= 2 ** (width - 1):
            value -= 2**width
        return arith.constant(self.type, value)

    def _bin(self, other: object, iop: Callable, fop: Callable | None = None) -> V:
        rhs = self._other(other)
        if self.is_float:
            if fop is None:
                raise TypeError("operation not defined for floats")
            return V(fop(self.v, rhs))
        if _NO_WRAP[0] and iop in (arith.addi, arith.muli, arith.shli):
            flags = ir.Attribute.parse("#arith.overflow<nsw, nuw>")
            return V(iop(self.v, rhs, overflow_flags=flags))
        return V(iop(self.v, rhs))

    def __add__(self, o: object) -> V:
        return self._bin(o, arith.addi, arith.addf)

    def __radd__(self, o: object) -> V:
        return self._bin(o, arith.addi, arith.addf)

    def __rmul__(self, o: object) -> V:
        return self._bin(o, arith.muli, arith.mulf)

    def __sub__(self, o: object) -> V:
        return self._bin(o, arith.subi, arith.subf)

    def __rsub__(self, o: object) -> V:
        return V(self._other(o)) - self

    def __mul__(self, o: object) -> V:
        return self._bin(o, arith.muli, arith.mulf)

    def __and__(self, o: object) -> V:
        return self._bin(o, arith.andi)

    def __or__(self, o: object) -> V:
        return self._bin(o, arith.ori)

    def __xor__(self, o: object) -> V:
        return self._bin(o, arith.xori)

    def __invert__(self) -> V:
        return self._bin(-1, arith.xori)

    def __lshift__(self, o: object) -> V:
        return self._bin(o, arith.shli)

    def __rshift__(self, o: object) -> V:
        return self._bin(o, arith.shrui)

    def _cmp(self, other: object, ipred: str, fpred: str) -> V:
        rhs = self._other(other)
        if self.is_float:
            return V(arith.cmpf(getattr(arith.CmpFPredicate, fpred), self.v, rhs))
        return V(arith.cmpi(getattr(arith.CmpIPredicate, ipred), self.v, rhs))

    def __lt__(self, o: object) -> V:  # type: ignore[override]
        return self._cmp(o, "slt", "OLT")

    def __le__(self, o: object) -> V:  # type: ignore[override]
        return self._cmp(o, "sle", "OLE")

    def __gt__(self, o: object) -> V:  # type: ignore[override]
        return self._cmp(o, "sgt", "OGT")

    def __ge__(self, o: object) -> V:  # type: ignore[override]
        return self._cmp(o, "sge", "OGE")

    def eq(self, o: object) -> V:
        return self._cmp(o, "eq", "OEQ")

    def ne(self, o: object) -> V:
        return self._cmp(o, "ne", "UNE")

    def ashr(self, o: object) -> V:
        """Arithmetic (sign-filling) right shift."""
        return V(arith.shrsi(self.v, self._other(o)))

    def ult(self, o: object) -> V:
        return V(arith.cmpi(arith.CmpIPredicate.ult, self.v, self._other(o)))

    def sel(self, a: object, b: object) -> V:
        """self ? a : b (self is i1; a and b of one type, numbers take the other's type)."""
        if isinstance(a, (V, ir.Value)):
            av = V(a)
            bv = V(av._other(b))
        elif not isinstance(b, (V, ir.Value)):
            make = cf if isinstance(a, float) or isinstance(b, float) else ci
            av, bv = make(a), make(b)
        else:
            bv = V(b)
            av = V(bv._other(a))
        return V(arith.select(self.v, av.v, bv.v))

    def smax(self, o: object) -> V:
        return V(arith.maxsi(self.v, self._other(o)))

    def smin(self, o: object) -> V:
        return V(arith.minsi(self.v, self._other(o)))

    def umax(self, o: object) -> V:
        return V(arith.maxui(self.v, self._other(o)))

    def fmax(self, o: object) -> V:
        return V(arith.maxnumf(self.v, self._other(o)))

    def i64(self) -> V:
        """Zero-extension to i64."""
        return V(arith.extui(_i64(), self.v))

    def i32(self) -> V:
        """Truncation to i32."""
        return V(arith.trunci(_i32(), self.v))

    def as_f32(self) -> V:
        return V(arith.bitcast(_f32(), self.v))

    def as_i32(self) -> V:
        return V(arith.bitcast(_i32(), self.v))


def ci(value: int) -> V:
    """i32 constant (values >= 2^31 wrap)."""
    value = int(value)
    if value >= 2**31:
        value -= 2**32
    return V(arith.constant(_i32(), value))


def cl(value: int) -> V:
    """i64 constant."""
    return V(arith.constant(_i64(), int(value)))


def cf(value: float) -> V:
    """f32 constant."""
    return V(arith.constant(_f32(), float(value)))


def _raw(x: V | ir.Value) -> ir.Value:
    return x.v if isinstance(x, V) else x


def vec_of(elems: Sequence[V | ir.Value], elem: ir.Type) -> ir.Value:
    return vector.from_elements(_vec(len(elems), elem), [_raw(e) for e in elems])


def vec_get(vec: ir.Value, i: int) -> V:
    return V(vector.extract(vec, [], [i]))


def vec_bitcast(vec: ir.Value, n: int, elem: ir.Type) -> ir.Value:
    return vector.bitcast(_vec(n, elem), vec)


def vec_cat(a: ir.Value, b: ir.Value) -> ir.Value:
    n = ir.VectorType(a.type).shape[0]
    return vector.shuffle(a, b, list(range(2 * n)))


def zeros_f32x4() -> ir.Value:
    t = _vec(4, _f32())
    return arith.constant(t, ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(_f32(), 0.0)))


def readfirstlane(x: V) -> V:
    return V(rocdl.readfirstlane(_i32(), x.v))


def lds_ptr(addr: V) -> ir.Value:
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), addr.v)


def global_ptr(addr: V) -> ir.Value:
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<1>"), addr.v)


def lds_load(ty: ir.Type, addr: V, align: int) -> ir.Value:
    return llvm.load(ty, lds_ptr(addr), alignment=align)


def lds_store(value: ir.Value, addr: V, align: int) -> None:
    llvm.store(value, lds_ptr(addr), alignment=align)


def global_load(ty: ir.Type, addr: V, align: int, volatile: bool = False) -> ir.Value:
    return llvm.load(ty, global_ptr(addr), alignment=align, volatile_=volatile)


def global_store(value: ir.Value, addr: V, align: int) -> None:
    llvm.store(value, global_ptr(addr), alignment=align)


def wait_vm() -> None:
    """s_waitcnt vmcnt(0): this wave's global loads and LDS DMA have landed."""
    fx.rocdl.s_waitcnt(vmcnt=0)


def wait_lgkm() -> None:
    """s_waitcnt lgkmcnt(0): this wave's LDS reads/writes are done."""
    fx.rocdl.s_waitcnt(lgkmcnt=0)


def barrier() -> None:
    """Workgroup barrier with LDS release/acquire fences (gpu.barrier)."""
    fx.gpu.barrier()


def sched_fence() -> None:
    """sched_barrier(0): the machine scheduler moves nothing across this point."""
    fx.rocdl.sched_barrier(0)


def pipelined(
    n: int, depth: int, issue: Callable[[int], object], consume: Callable[[int, object], None], drained: Callable[[], None] | None = None
) -> None:
    """Software pipeline: issue(i) (loads) runs `depth` steps ahead of consume(i) (math).

    Scheduling fences keep this order in the final code. `drained` runs once, right after the
    last issue, before the remaining consumes.
    """
    pending = {i: issue(i) for i in range(min(depth, n))}
    if n <= depth and drained is not None:
        sched_fence()
        drained()
    for i in range(n):
        sched_fence()
        if i + depth < n:
            pending[i + depth] = issue(i + depth)
            if i + depth == n - 1 and drained is not None:
                sched_fence()
                drained()
        sched_fence()
        consume(i, pending.pop(i))
    sched_fence()


def lane_xor(x: V, lane: V, mask: int) -> V:
    """Value of x (i32 bits) in lane `lane ^ mask` (ds_bpermute)."""
    idx = (lane ^ mask) << 2
    return V(rocdl.ds_bpermute(_i32(), idx.v, x.v))


def for_loop(lb: V, ub: V, init: list[ir.Value], body: Callable[[V, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """scf.for over i32 [lb, ub) step 1 carrying `init`; body(iv, state) returns the next state.

    The loop is marked not to be unrolled (its body is large and register-bound).
    """
    op = scf.ForOp(lb.v, ub.v, ci(1).v, init)
    op.attributes["loop_annotation"] = ir.Attribute.parse("#llvm.loop_annotation<unroll = <disable = true>>")
    with ir.InsertionPoint(op.body):
        nxt = body(V(op.induction_variable), list(op.inner_iter_args))
        scf.YieldOp([_raw(x) for x in nxt])
    return list(op.results)


def if_then(cond: V, then: Callable[[], None]) -> None:
    """scf.if without results."""
    op = scf.IfOp(cond.v)
    with ir.InsertionPoint(op.then_block):
        then()
        scf.YieldOp([])


# ================================================================ numerics helpers


def bf16_pair_to_f32(word: V) -> tuple[V, V]:
    """One i32 holding two bf16 (element 0 in the low half) -> two exact f32."""
    return (word << 16).as_f32(), (word & 0xFFFF0000).as_f32()


def pack_e4m3(vals: Sequence[V]) -> V:
    """4 f32 -> one i32 of e4m3 codes, RNE (v_cvt_pk_fp8_f32; byte i = vals[i])."""
    lo = rocdl.cvt_pk_fp8_f32(_i32(), vals[0].v, vals[1].v, ci(0).v, False)
    return V(rocdl.cvt_pk_fp8_f32(_i32(), vals[2].v, vals[3].v, lo, True))


def unpack_e4m3(word: V) -> list[V]:
    """One i32 of 4 e4m3 codes -> 4 exact f32 (v_cvt_pk_f32_fp8)."""
    out: list[V] = []
    for hi in (False, True):
        pair = rocdl.cvt_pk_f32_fp8(_vec(2, _f32()), word.v, hi)
        out += [vec_get(pair, 0), vec_get(pair, 1)]
    return out


def e4m3x8_to_f16x8(raw: ir.Value) -> ir.Value:
    """8 e4m3 codes (vector<2xi32>) -> vector<8xf16>, exact (scale 1.0)."""
    one = cf(1.0).v
    parts = []
    for word_i in range(2):
        word = vec_get(raw, word_i).v
        for hi in (False, True):
            parts.append(rocdl.cvt_scalef32_pk_f16_fp8(_vec(2, _f16()), word, one, hi))
    return vec_cat(vec_cat(parts[0], parts[1]), vec_cat(parts[2], parts[3]))


def mfma_bf16(a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    """v_mfma_f32_16x16x32_bf16."""
    blgp = ir.Attribute.parse("#rocdl<mfma_perm_b none>")
    return rocdl.mfma_f32_16x16x32_bf16_(_vec(4, _f32()), a, b, acc, 0, 0, blgp)


def mfma_f16(a: ir.Value, b: ir.Value, acc: ir.Value) -> ir.Value:
    """v_mfma_f32_16x16x32_f16."""
    blgp = ir.Attribute.parse("#rocdl<mfma_perm_b none>")
    return rocdl.mfma_f32_16x16x32_f16_(_vec(4, _f32()), a, b, acc, 0, 0, blgp)


def exp2(x: V) -> V:
    """v_exp_f32."""
    return V(rocdl.exp2(_f32(), x.v))


def log2(x: V) -> V:
    """v_log_f32 (base 2)."""
    return V(rocdl.log(_f32(), x.v))
