"""Cases of convolution, pooling, resampling and padding: odd sizes, strides 1-3, paddings 0-2,
dilations 1-2, several channels and batches, F16 where the op takes it, permuted inputs."""

from __future__ import annotations

from pyggml.testing import oracles
from pyggml.testing.cases import NMSE_F16, distinct, op_case

# the composite convolutions (conv_1d/_2d/_dw) store the data as F16 columns (im2col's dst type) before
# the mul_mat: their error is F16 rounding of the data even with F32 inputs
_F16_COLUMNS = NMSE_F16

# loop variables the tables below reuse for parameter tuples and kernel shapes of several lengths
_g: tuple[int, ...]
_kk: tuple[int, ...]
# the ignore[call-arg]s below: mypy counts f(*g, x), g of unknown length (a lambda's default is untyped),
# as too many arguments (python/mypy#14648)

# --- im2col -----------------------------------------------------------------------------------------------------
# 2-D: (kernel KH, KW), (IC, H, W), N, s0, s1, p0, p1, d0, d1
_IM2COL_2D = [
    ((3, 3), (2, 7, 9), 1, 1, 1, 0, 0, 1, 1),
    ((3, 3), (3, 11, 7), 2, 2, 1, 1, 1, 1, 1),
    ((2, 5), (1, 9, 13), 1, 3, 2, 2, 0, 1, 2),
    ((3, 2), (2, 13, 11), 2, 1, 3, 0, 2, 2, 1),
    ((1, 1), (4, 5, 5), 3, 1, 1, 0, 0, 1, 1),
    ((5, 3), (2, 9, 7), 1, 2, 2, 2, 1, 2, 2),
]
for _i, (_kk, (_ic, _h, _w), _n, _s0, _s1, _p0, _p1, _d0, _d1) in enumerate(_IM2COL_2D):
    for _dst in ("f32", "f16"):
        _g = (_s0, _s1, _p0, _p1, _d0, _d1)
        op_case(f"im2col/f32/2d_{_dst}_{_i}", {"a": ("f32", (2, _ic) + _kk), "b": ("f32", (_n, _ic, _h, _w))},
                lambda c, x, g=_g, t=_dst: c.im2col(x.a, x.b, *g, True, t),
                lambda x, g=_g: oracles.im2col(x.a, x.b, *g, True),  # type: ignore[call-arg]
                nmse=NMSE_F16 if _dst == "f16" else None)
    op_case(f"im2col/f16/2d_{_i}", {"a": ("f16", (2, _ic) + _kk), "b": ("f16", (_n, _ic, _h, _w))},
            lambda c, x, g=_g: c.im2col(x.a, x.b, *g, True, "f16"),
            lambda x, g=_g: oracles.im2col(x.a, x.b, *g, True))  # type: ignore[call-arg]
# 1-D: K, (IC, W), N, s0, p0, d0
_IM2COL_1D = [(3, (2, 11), 1, 1, 0, 1), (5, (3, 13), 2, 2, 2, 1), (3, (1, 17), 3, 3, 1, 2), (2, (4, 7), 2, 1, 1, 2)]
for _i, (_k, (_ic, _w), _n, _s0, _p0, _d0) in enumerate(_IM2COL_1D):
    for _dst in ("f32", "f16"):
        _g = (_s0, 0, _p0, 0, _d0, 0)
        op_case(f"im2col/f32/1d_{_dst}_{_i}", {"a": ("f32", (3, _ic, _k)), "b": ("f32", (_n, _ic, _w))},
                lambda c, x, g=_g, t=_dst: c.im2col(x.a, x.b, *g, False, t),
                lambda x, g=_g: oracles.im2col(x.a, x.b, *g, False),  # type: ignore[call-arg]
                nmse=NMSE_F16 if _dst == "f16" else None)
# permuted data: channels and batches swapped in memory (the kernel reads whole rows, any plane strides)
op_case("im2col/f32/2d_permuted", {"a": ("f32", (2, 3, 3, 3)), "b": ("f32", (3, 2, 7, 9))},
        lambda c, x: c.im2col(x.a, c.permute(x.b, 0, 1, 3, 2), 2, 1, 1, 0, 1, 2, True, "f32"),
        lambda x: oracles.im2col(x.a, x.b.transpose(1, 0, 2, 3), 2, 1, 1, 0, 1, 2, True))
op_case("im2col/f32/1d_permuted", {"a": ("f32", (2, 3, 3)), "b": ("f32", (3, 2, 11))},
        lambda c, x: c.im2col(x.a, c.permute(x.b, 0, 2, 1, 3), 1, 0, 1, 0, 1, 0, False, "f32"),
        lambda x: oracles.im2col(x.a, x.b.transpose(1, 0, 2), 1, 0, 1, 0, 1, 0, False))

# --- conv_1d / conv_2d (im2col + mul_mat) ---------------------------------------------------------------------------
# ggml_conv_1d's last reshape reads the mul_mat result [OW*N, OC] as [OW, OC, N]: with N > 1 the channels and
# conv_1d of one sequence only: ggml_conv_1d mixes batches and channels when N > 1 (its final reshape_3d
# ignores the mul_mat layout [OW*N, OC]) on every backend, and the wrapper refuses it (docs/findings.md)
# conv_1d: K, IC, OC, W, s0, p0, d0
for _i, (_k, _ic, _oc, _w, _s, _p, _d) in enumerate([(3, 2, 3, 11, 1, 0, 1), (5, 3, 2, 13, 2, 2, 1),
                                                     (3, 1, 4, 17, 3, 1, 2), (2, 4, 3, 9, 1, 1, 2)]):
    for _t in ("f32", "f16"):
        _g = (_s, _p, _d)
        op_case(f"conv_1d/{_t}/{_i}", {"a": (_t, (_oc, _ic, _k)), "b": ("f32", (1, _ic, _w))},
                lambda c, x, g=_g: c.conv_1d(x.a, x.b, *g), lambda x, g=_g: oracles.conv_1d(x.a, x.b, *g),
                nmse=_F16_COLUMNS)
# conv_2d / conv_2d_direct: (KH, KW), IC, OC, (H, W), N, s0, s1, p0, p1, d0, d1
_CONV_2D = [
    ((3, 3), 2, 3, (7, 9), 1, 1, 1, 0, 0, 1, 1),
    ((3, 3), 3, 2, (11, 7), 2, 2, 2, 1, 1, 1, 1),
    ((2, 5), 1, 4, (9, 13), 1, 1, 3, 2, 0, 1, 2),
    ((3, 2), 2, 3, (13, 11), 2, 3, 1, 0, 2, 2, 1),
    ((1, 1), 4, 3, (5, 7), 1, 1, 1, 0, 0, 1, 1),
    ((5, 3), 2, 2, (9, 7), 1, 2, 1, 1, 2, 2, 2),
]
for _i, (_kk, _ic, _oc, _hw, _n, *_gs) in enumerate(_CONV_2D):
    _g = tuple(_gs)
    for _t in ("f32", "f16"):
        op_case(f"conv_2d/{_t}/{_i}", {"a": (_t, (_oc, _ic) + _kk), "b": ("f32", (_n, _ic) + _hw)},
                lambda c, x, g=_g: c.conv_2d(x.a, x.b, *g), lambda x, g=_g: oracles.conv_2d(x.a, x.b, *g),
                nmse=_F16_COLUMNS)
        op_case(f"conv_2d_direct/{_t}/{_i}", {"a": (_t, (_oc, _ic) + _kk), "b": ("f32", (_n, _ic) + _hw)},
                lambda c, x, g=_g: c.conv_2d_direct(x.a, x.b, *g), lambda x, g=_g: oracles.conv_2d_direct(x.a, x.b, *g))

# --- depthwise ----------------------------------------------------------------------------------------------------------
for _i, (_k, _ch, _w, _s, _p, _d) in enumerate([(3, 2, 11, 1, 0, 1), (5, 3, 13, 2, 2, 1), (3, 4, 17, 3, 1, 2)]):
    _g = (_s, _p, _d)
    op_case(f"conv_1d_dw/f32/{_i}", {"a": ("f32", (_ch, 1, _k)), "b": ("f32", (1, _ch, _w))},
            lambda c, x, g=_g: c.conv_1d_dw(x.a, x.b, *g), lambda x, g=_g: oracles.conv_1d_dw(x.a, x.b, *g),
            nmse=_F16_COLUMNS)
for _i, (_kk, _ic, _oc, _hw, _n, *_gs) in enumerate(_CONV_2D):
    _g = tuple(_gs)
    # with an F32 kernel the graph multiplies F32 by F16 columns, which the CPU mul_mat does not take
    for _t in ("f32", "f16"):
        op_case(f"conv_2d_dw/{_t}/{_i}", {"a": (_t, (_ic, 1) + _kk), "b": ("f32", (_n, _ic) + _hw)},
                lambda c, x, g=_g: c.conv_2d_dw(x.a, x.b, *g), lambda x, g=_g: oracles.conv_2d_dw(x.a, x.b, *g),
                nmse=_F16_COLUMNS)
    op_case(f"conv_2d_dw_direct/f16/{_i}", {"a": ("f16", (_ic, 1) + _kk), "b": ("f32", (_n, _ic) + _hw)},
            lambda c, x, g=_g: c.conv_2d_dw_direct(x.a, x.b, *g), lambda x, g=_g: oracles.conv_2d_dw_direct(x.a, x.b, *g))
    op_case(f"conv_2d_dw_direct/f32/{_i}", {"a": ("f32", (_ic, 1) + _kk), "b": ("f32", (_n, _ic) + _hw)},
            lambda c, x, g=_g: c.conv_2d_dw_direct(x.a, x.b, *g), lambda x, g=_g: oracles.conv_2d_dw_direct(x.a, x.b, *g))
# channels innermost in memory (ggml_is_contiguous_channels: the CWHN layout and result)
op_case("conv_2d_dw_direct/f32/cwhn", {"a": ("f32", (3, 3, 3, 1)), "b": ("f32", (2, 7, 9, 3))},
        # the result is CWHN too (not contiguous): cont() so a device result can be read back
        lambda c, x: c.cont(c.conv_2d_dw_direct(c.permute(x.a, 2, 3, 0, 1), c.permute(x.b, 2, 0, 1, 3), 1, 2, 1, 1, 1, 1)),
        lambda x: oracles.conv_2d_dw_direct(x.a.transpose(2, 3, 0, 1), x.b.transpose(0, 3, 1, 2), 1, 2, 1, 1, 1, 1))

# --- transposed ---------------------------------------------------------------------------------------------------------
for _i, (_k, _ic, _oc, _w, _s) in enumerate([(3, 2, 3, 7, 1), (5, 3, 2, 9, 2), (2, 1, 4, 11, 3), (4, 4, 3, 5, 2)]):
    for _t in ("f32", "f16"):
        op_case(f"conv_transpose_1d/{_t}/{_i}", {"a": (_t, (_ic, _oc, _k)), "b": ("f32", (_ic, _w))},
                lambda c, x, s=_s: c.conv_transpose_1d(x.a, x.b, s, 0, 1),
                lambda x, s=_s: oracles.conv_transpose_1d(x.a, x.b, s),
                nmse=NMSE_F16 if _t == "f16" else None)  # the F16 kernel rounds b to F16
for _i, (_kk, _ic, _oc, _hw, _n, _s) in enumerate([((3, 3), 2, 3, (5, 7), 1, 1), ((2, 3), 3, 2, (7, 5), 2, 2),
                                                   ((3, 2), 1, 2, (5, 5), 1, 3)]):
    for _t in ("f32", "f16"):
        op_case(f"conv_transpose_2d_p0/{_t}/{_i}", {"a": (_t, (_ic, _oc) + _kk), "b": ("f32", (_n, _ic) + _hw)},
                lambda c, x, s=_s: c.conv_transpose_2d_p0(x.a, x.b, s),
                lambda x, s=_s: oracles.conv_transpose_2d_p0(x.a, x.b, s),
                nmse=NMSE_F16 if _t == "f16" else None)  # the F16 kernel rounds b to F16

# --- pooling (distinct values: max has no ties) ----------------------------------------------------------------------
for _i, (_shape, _k, _s, _p) in enumerate([((3, 11), 3, 1, 0), ((2, 3, 13), 5, 2, 2), ((17,), 3, 3, 1), ((2, 9), 2, 2, 1)]):
    for _op in (0, 1):
        for _t in ("f32", "f16"):
            op_case(f"pool_1d/{_t}/{'max' if _op == 0 else 'avg'}_{_i}", {"a": (_t, _shape, distinct())},
                    lambda c, x, g=(_op, _k, _s, _p): c.pool_1d(x.a, *g),
                    lambda x, g=(_op, _k, _s, _p): oracles.pool_1d(x.a, *g))
for _i, (_shape, _k0, _k1, _s0, _s1, _p0, _p1) in enumerate([((2, 7, 9), 3, 3, 1, 1, 0, 0), ((3, 11, 7), 3, 2, 2, 3, 1, 1),
                                                              ((1, 2, 9, 13), 5, 3, 3, 2, 2, 0), ((5, 5), 2, 2, 2, 2, 1, 1)]):
    for _op in (0, 1):
        for _t in ("f32", "f16"):
            op_case(f"pool_2d/{_t}/{'max' if _op == 0 else 'avg'}_{_i}", {"a": (_t, _shape, distinct())},
                    lambda c, x, g=(_op, _k0, _k1, _s0, _s1, _p0, _p1): c.pool_2d(x.a, *g),
                    lambda x, g=(_op, _k0, _k1, _s0, _s1, _p0, _p1): oracles.pool_2d(x.a, *g))

# --- padding ------------------------------------------------------------------------------------------------------------
for _i, (_shape, _p0, _p1) in enumerate([((3, 7), 2, 3), ((2, 3, 11), 0, 5), ((13,), 4, 0), ((2, 2, 2, 5), 1, 1)]):
    op_case(f"pad_reflect_1d/f32/{_i}", {"a": ("f32", _shape)}, lambda c, x, p=(_p0, _p1): c.pad_reflect_1d(x.a, *p),
            lambda x, p=(_p0, _p1): oracles.pad_reflect_1d(x.a, *p), exact=True)

# --- col2im_1d: a [T_in, K*OC] ------------------------------------------------------------------------------------------
for _i, (_t_in, _k, _oc, _s, _p) in enumerate([(5, 3, 2, 1, 0), (7, 4, 3, 2, 1), (4, 5, 1, 3, 2), (9, 2, 4, 2, 0)]):
    for _t in ("f32", "f16", "bf16"):
        op_case(f"col2im_1d/{_t}/{_i}", {"a": (_t, (_t_in, _k * _oc))}, lambda c, x, g=(_s, _oc, _p): c.col2im_1d(x.a, *g),
                lambda x, g=(_s, _oc, _p): oracles.col2im_1d(x.a, *g))

# --- resampling: modes nearest 0, bilinear 1, | 256 align corners ----------------------------------------------------------
for _i, (_shape, _f) in enumerate([((2, 5, 7), 2), ((3, 1, 3, 5), 3), ((7, 9), 2)]):
    for _m in (0, 1, 257):
        op_case(f"upscale/f32/{_m}_{_i}", {"a": ("f32", _shape)}, lambda c, x, f=_f, m=_m: c.upscale(x.a, f, m),
                lambda x, f=_f, m=_m: oracles.upscale(x.a, f, m), exact=_m == 0)
# (ggml order ne of the input, of the result)
for _i, (_ne_in, _ne_out) in enumerate([((5, 7, 2, 1), (11, 13, 2, 1)), ((9, 7, 3, 1), (4, 5, 3, 1)),
                                        ((5, 5, 1, 1), (7, 3, 1, 1)), ((6, 3, 2, 2), (12, 9, 4, 2)),
                                        ((7, 5, 3, 1), (7, 5, 3, 1))]):
    for _m in (0, 1, 257):
        for _name in ("interpolate", "upscale_ext"):
            op_case(f"{_name}/f32/{_m}_{_i}", {"a": ("f32", _ne_in[::-1])},
                    lambda c, x, n=_ne_out, m=_m, op=_name: getattr(c, op)(x.a, *n, m),
                    lambda x, n=_ne_out, m=_m: oracles.interpolate(x.a, *n, m),  # type: ignore[call-arg]
                    exact=_m == 0)
# a transposed input: the kernels read through the strides
op_case("interpolate/f32/transposed", {"a": ("f32", (2, 7, 5))},
        lambda c, x: c.interpolate(c.transpose(x.a), 11, 9, 2, 1, 1),
        lambda x: oracles.interpolate(x.a.transpose(0, 2, 1), 11, 9, 2, 1, 1))

# --- 3-D: (KD, KH, KW), IC, OC, (D, H, W), N, s0, s1, s2, p0, p1, p2, d0, d1, d2 ------------------------------------------
_CONV_3D = [
    ((3, 3, 3), 2, 3, (5, 7, 9), 1, 1, 1, 1, 0, 0, 0, 1, 1, 1),
    ((2, 3, 2), 3, 2, (5, 5, 7), 2, 2, 1, 3, 1, 1, 2, 1, 2, 1),
    ((1, 2, 3), 1, 4, (3, 9, 7), 1, 1, 2, 1, 0, 2, 1, 2, 1, 1),
    ((3, 1, 2), 2, 2, (7, 3, 5), 2, 1, 1, 2, 1, 0, 0, 1, 1, 2),
]
for _i, (_kk, _ic, _oc, _dhw, _n, *_gs) in enumerate(_CONV_3D):
    _g = tuple(_gs)
    for _dst in ("f32", "f16"):
        op_case(f"im2col_3d/f32/{_dst}_{_i}", {"a": ("f32", (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)},
                lambda c, x, g=_g, ic=_ic, t=_dst: c.im2col_3d(x.a, x.b, ic, *g, t),
                lambda x, g=_g, ic=_ic: oracles.im2col_3d(x.a, x.b, ic, *g), nmse=NMSE_F16 if _dst == "f16" else None)
    for _t in ("f32", "f16"):
        op_case(f"conv_3d/{_t}/{_i}", {"a": (_t, (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)},
                lambda c, x, g=_g, ic=_ic: c.conv_3d(x.a, x.b, ic, *g),
                lambda x, g=_g, ic=_ic: oracles.conv_3d(x.a, x.b, ic, *g), nmse=_F16_COLUMNS)
        op_case(f"conv_3d_direct/{_t}/{_i}", {"a": (_t, (_oc * _ic,) + _kk), "b": ("f32", (_n * _ic,) + _dhw)},
                lambda c, x, g=_g + (_ic, _n, _oc): c.conv_3d_direct(x.a, x.b, *g),
                lambda x, g=_g + (_ic, _n, _oc): oracles.conv_3d_direct(x.a, x.b, *g),
                nmse=NMSE_F16 if _t == "f16" else None)  # an F16 kernel: the patches are stored as F16
# a permuted input (depth and height swapped in memory): the kernels read through the strides
op_case("im2col_3d/f32/permuted", {"a": ("f32", (4, 3, 3, 3)), "b": ("f32", (2, 7, 5, 9))},
        lambda c, x: c.im2col_3d(x.a, c.permute(x.b, 0, 2, 1, 3), 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, "f32"),
        lambda x: oracles.im2col_3d(x.a, x.b.transpose(0, 2, 1, 3), 2, 1, 1, 1, 1, 1, 1, 1, 1, 1))
op_case("conv_3d_direct/f32/permuted", {"a": ("f32", (4, 3, 3, 3)), "b": ("f32", (2, 7, 5, 9))},
        lambda c, x: c.conv_3d_direct(x.a, c.permute(x.b, 0, 2, 1, 3), 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2),
        lambda x: oracles.conv_3d_direct(x.a, x.b.transpose(0, 2, 1, 3), 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 2))
