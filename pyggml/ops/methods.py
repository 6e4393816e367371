"""The op wrappers as methods of Context: `ctx.add(a, b)` is `ops.add(ctx, a, b)`.

An explicit registry, one line per op, so that IDEs and type checkers see every method with its
signature. tests/test_types.py checks that it lists exactly the wrappers of pyggml.ops.
"""

from __future__ import annotations

from pyggml.ops import attention, convolution, elementwise, matmul, movement, recurrent, reductions, training


class OpMethods:
    """Mixed into Context: each attribute is the wrapper itself, so `self` is the context."""

    # elementwise
    abs = elementwise.abs
    acc = elementwise.acc
    add = elementwise.add
    add1 = elementwise.add1
    add_cast = elementwise.add_cast
    arange = elementwise.arange
    cast = elementwise.cast
    ceil = elementwise.ceil
    clamp = elementwise.clamp
    cos = elementwise.cos
    count_equal = elementwise.count_equal
    cumsum = elementwise.cumsum
    diag = elementwise.diag
    diag_mask_zero = elementwise.diag_mask_zero
    div = elementwise.div
    elu = elementwise.elu
    exp = elementwise.exp
    expm1 = elementwise.expm1
    fill = elementwise.fill
    floor = elementwise.floor
    geglu = elementwise.geglu
    geglu_erf = elementwise.geglu_erf
    geglu_erf_split = elementwise.geglu_erf_split
    geglu_erf_swapped = elementwise.geglu_erf_swapped
    geglu_quick = elementwise.geglu_quick
    geglu_quick_split = elementwise.geglu_quick_split
    geglu_quick_swapped = elementwise.geglu_quick_swapped
    geglu_split = elementwise.geglu_split
    geglu_swapped = elementwise.geglu_swapped
    gelu = elementwise.gelu
    gelu_erf = elementwise.gelu_erf
    gelu_quick = elementwise.gelu_quick
    hardsigmoid = elementwise.hardsigmoid
    hardswish = elementwise.hardswish
    leaky_relu = elementwise.leaky_relu
    log = elementwise.log
    mul = elementwise.mul
    neg = elementwise.neg
    pad_circular = elementwise.pad_circular
    pad_ext = elementwise.pad_ext
    pad_ext_circular = elementwise.pad_ext_circular
    reglu = elementwise.reglu
    reglu_split = elementwise.reglu_split
    reglu_swapped = elementwise.reglu_swapped
    relu = elementwise.relu
    repeat_4d = elementwise.repeat_4d
    roll = elementwise.roll
    round = elementwise.round
    scale = elementwise.scale
    scale_bias = elementwise.scale_bias
    set = elementwise.set
    set_1d = elementwise.set_1d
    set_2d = elementwise.set_2d
    sgn = elementwise.sgn
    sigmoid = elementwise.sigmoid
    silu = elementwise.silu
    sin = elementwise.sin
    softplus = elementwise.softplus
    sqr = elementwise.sqr
    sqrt = elementwise.sqrt
    step = elementwise.step
    sub = elementwise.sub
    swiglu = elementwise.swiglu
    swiglu_clamp = elementwise.swiglu_clamp
    swiglu_oai = elementwise.swiglu_oai
    swiglu_split = elementwise.swiglu_split
    swiglu_swapped = elementwise.swiglu_swapped
    tanh = elementwise.tanh
    timestep_embedding = elementwise.timestep_embedding
    tri = elementwise.tri
    trunc = elementwise.trunc
    xielu = elementwise.xielu

    # reductions
    argmax = reductions.argmax
    argsort = reductions.argsort
    argsort_top_k = reductions.argsort_top_k
    group_norm = reductions.group_norm
    l2_norm = reductions.l2_norm
    mean = reductions.mean
    norm = reductions.norm
    rms_norm = reductions.rms_norm
    sum = reductions.sum
    sum_rows = reductions.sum_rows
    top_k = reductions.top_k

    # matmul
    add_id = matmul.add_id
    mul_mat = matmul.mul_mat
    mul_mat_id = matmul.mul_mat_id
    out_prod = matmul.out_prod

    # attention
    add_rel_pos = attention.add_rel_pos
    diag_mask_inf = attention.diag_mask_inf
    dsv4_hc_comb = attention.dsv4_hc_comb
    dsv4_hc_post = attention.dsv4_hc_post
    dsv4_hc_pre = attention.dsv4_hc_pre
    dsv4_hc_pre_gated = attention.dsv4_hc_pre_gated
    flash_attn_ext = attention.flash_attn_ext
    flash_attn_ext_add_sinks = attention.flash_attn_ext_add_sinks
    flash_attn_ext_set_prec = attention.flash_attn_ext_set_prec
    get_rel_pos = attention.get_rel_pos
    lightning_indexer = attention.lightning_indexer
    rope_ext = attention.rope_ext
    rope_multi = attention.rope_multi
    soft_max = attention.soft_max
    soft_max_ext = attention.soft_max_ext
    win_part = attention.win_part
    win_unpart = attention.win_unpart

    # recurrent
    gated_delta_net = recurrent.gated_delta_net
    gated_linear_attn = recurrent.gated_linear_attn
    rwkv_wkv6 = recurrent.rwkv_wkv6
    rwkv_wkv7 = recurrent.rwkv_wkv7
    solve_tri = recurrent.solve_tri
    ssm_conv = recurrent.ssm_conv
    ssm_scan = recurrent.ssm_scan

    # convolution
    col2im_1d = convolution.col2im_1d
    conv_1d = convolution.conv_1d
    conv_1d_dw = convolution.conv_1d_dw
    conv_2d = convolution.conv_2d
    conv_2d_direct = convolution.conv_2d_direct
    conv_2d_dw = convolution.conv_2d_dw
    conv_2d_dw_direct = convolution.conv_2d_dw_direct
    conv_3d = convolution.conv_3d
    conv_3d_direct = convolution.conv_3d_direct
    conv_transpose_1d = convolution.conv_transpose_1d
    conv_transpose_2d_p0 = convolution.conv_transpose_2d_p0
    im2col = convolution.im2col
    im2col_3d = convolution.im2col_3d
    interpolate = convolution.interpolate
    pad_reflect_1d = convolution.pad_reflect_1d
    pool_1d = convolution.pool_1d
    pool_2d = convolution.pool_2d
    upscale = convolution.upscale
    upscale_ext = convolution.upscale_ext

    # movement
    concat = movement.concat
    cont = movement.cont
    cont_1d = movement.cont_1d
    cont_2d = movement.cont_2d
    cont_3d = movement.cont_3d
    cont_4d = movement.cont_4d
    cpy = movement.cpy
    dup = movement.dup
    get_rows = movement.get_rows
    pad = movement.pad
    permute = movement.permute
    repeat = movement.repeat
    reshape = movement.reshape
    reshape_1d = movement.reshape_1d
    reshape_2d = movement.reshape_2d
    reshape_3d = movement.reshape_3d
    reshape_4d = movement.reshape_4d
    set_name = movement.set_name
    set_rows = movement.set_rows
    transpose = movement.transpose
    view_1d = movement.view_1d
    view_2d = movement.view_2d
    view_3d = movement.view_3d
    view_4d = movement.view_4d
    view_nd = movement.view_nd
    view_tensor = movement.view_tensor

    # training
    cross_entropy_loss = training.cross_entropy_loss
    cross_entropy_loss_back = training.cross_entropy_loss_back
    get_rows_back = training.get_rows_back
    im2col_back = training.im2col_back
    opt_step_adamw = training.opt_step_adamw
    opt_step_sgd = training.opt_step_sgd
    pool_2d_back = training.pool_2d_back
    repeat_back = training.repeat_back
    rms_norm_back = training.rms_norm_back
    rope_ext_back = training.rope_ext_back
    silu_back = training.silu_back
    soft_max_ext_back = training.soft_max_ext_back
