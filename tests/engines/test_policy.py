"""The activation-format policy: parsing, choices per op/family/range, refusals, the promise."""

import pytest

from metrale_export.engines.nodes import OpInfo
from metrale_export.engines.policy import (
    ADAPTIVE_BF16_MAX_ROWS,
    ALLOWED,
    FAMILIES,
    FORMATS,
    OP_TYPES,
    PolicyError,
    choose_format,
    choose_formats,
    describe_refusals,
    parse_policy,
    row_invariance,
)
from metrale_export.engines.profiles import RowRange, parse_profiles

RANGES = parse_profiles("1,2-8,9-32,33-128,129-4096")
DECLARED = {"W4A16Proj": "bf16", "W8A8Proj": "fp8", "W4A4Proj": "nvfp4",
            "W4A16MoEProj": "bf16", "W8A8MoEProj": "fp8", "W4A4MoEProj": "nvfp4"}


def test_grouped_expert_ops_follow_their_weight_formats_table():
    """docs/ops.md: a grouped-expert op runs the activation formats of its dense op, per family moe."""
    policy = parse_policy("moe=bf16")
    for dense, grouped in (("W4A16Proj", "W4A16MoEProj"), ("W8A8Proj", "W8A8MoEProj"), ("W4A4Proj", "W4A4MoEProj")):
        assert ALLOWED[grouped] == ALLOWED[dense]
        assert choose_format(policy, grouped, "moe", DECLARED[grouped], RANGES[0]).format == "bf16"
    c = choose_format(parse_policy("moe=fp8"), "W4A4MoEProj", "moe", "nvfp4", RANGES[0])
    assert not c.ok and "W4A4MoEProj" in c.reason


def test_parse_kinds():
    assert parse_policy("adaptive").kind == "adaptive"
    assert parse_policy("declared").kind == "declared"
    for f in FORMATS:
        p = parse_policy(f)
        assert p.kind == "fixed" and p.fixed == f
    p = parse_policy("ffn=fp8, attn=bf16,gdn=nvfp4,moe=fp8")
    assert p.kind == "per_family"
    assert p.per_family == {"ffn": "fp8", "attn": "bf16", "gdn": "nvfp4", "moe": "fp8"}


@pytest.mark.parametrize(
    "spec, words",
    [("", "expected adaptive"), ("int8", "expected adaptive"), ("mlp=fp8", "unknown family 'mlp'"),
     ("ffn=int4", "ffn='int4'"), ("ffn=fp8,ffn=bf16", "given twice")],
)
def test_parse_errors(spec, words):
    with pytest.raises(PolicyError, match="--activation-quantization") as e:
        parse_policy(spec)
    assert words in str(e.value)


@pytest.mark.parametrize("op_type", OP_TYPES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_fixed_follows_the_contract_table_in_every_range(op_type, fmt):
    policy = parse_policy(fmt)
    choices = {choose_format(policy, op_type, "ffn", DECLARED[op_type], r) for r in RANGES}
    assert len(choices) == 1  # the same in every profile: the precondition of row invariance
    (choice,) = choices
    if fmt in ALLOWED[op_type]:
        assert choice.format == fmt
    else:
        assert choice.format is None
        assert "not in the op contract's table" in choice.reason and op_type in choice.reason


def test_fp8_with_int4_weights_is_refused_with_reason():
    c = choose_format(parse_policy("fp8"), "W4A16Proj", "ffn", "bf16", RowRange(1, 1))
    assert not c.ok
    assert "fp8 activations with int4 weights (W4A16Proj)" in c.reason and "runs bf16" in c.reason


def test_declared_uses_the_attribute():
    p = parse_policy("declared")
    assert choose_format(p, "W8A8Proj", "attn", "bf16", RowRange(1, 1)).format == "bf16"
    assert choose_format(p, "W8A8Proj", "attn", "fp8", RowRange(129, 4096)).format == "fp8"
    bad = choose_format(p, "W4A16Proj", "attn", "nvfp4", RowRange(1, 1))
    assert not bad.ok and "W4A16Proj runs bf16" in bad.reason
    assert not choose_format(p, "W8A8Proj", "attn", "int8", RowRange(1, 1)).ok


def test_per_family_and_unnamed_families():
    p = parse_policy("ffn=bf16,head=nvfp4")
    r = RowRange(33, 128)
    assert choose_format(p, "W8A8Proj", "ffn", "fp8", r).format == "bf16"
    assert choose_format(p, "W4A4Proj", "head", "bf16", r).format == "nvfp4"
    # attn is not named: the export's declaration stands.
    assert choose_format(p, "W8A8Proj", "attn", "fp8", r).format == "fp8"
    assert not choose_format(p, "W8A8Proj", "head", "fp8", r).ok  # nvfp4 with FP8 weights


def test_adaptive_switches_at_the_documented_row_count():
    p = parse_policy("adaptive")
    for r in RANGES:
        small = r.hi <= ADAPTIVE_BF16_MAX_ROWS
        assert choose_format(p, "W8A8Proj", "ffn", "fp8", r).format == ("bf16" if small else "fp8")
        assert choose_format(p, "W4A4Proj", "ffn", "nvfp4", r).format == ("bf16" if small else "nvfp4")
        assert choose_format(p, "W4A16Proj", "ffn", "bf16", r).format == "bf16"


def test_row_invariance_promise():
    assert row_invariance(parse_policy("fp8"))[0]
    assert row_invariance(parse_policy("declared"))[0]
    assert row_invariance(parse_policy("ffn=fp8"))[0]
    ok, reason = row_invariance(parse_policy("adaptive"))
    assert not ok and "adaptive" in reason
    ok, reason = row_invariance(parse_policy("bf16"), lowering="qdq")
    assert not ok and "qdq" in reason


def test_choose_formats_names_each_refused_op():
    ops = [OpInfo("a", "W4A16Proj", "attn", "bf16", 8, 8), OpInfo("b", "W8A8Proj", "ffn", "fp8", 8, 8)]
    formats, refusals = choose_formats(parse_policy("fp8"), ops, RowRange(2, 8))
    assert formats == {"b": "fp8"}
    assert [(op.key, "int4 weights" in reason) for op, reason in refusals] == [("a", True)]
    assert set(FAMILIES) == {"attn", "ffn", "gdn", "moe", "head"}


def test_refusals_are_described_once_per_op():
    op = OpInfo("layers.0.mlp.down_proj", "W4A16Proj", "ffn", "bf16", 8, 8)
    everywhere = {(op, "why"): list(RANGES)}
    assert describe_refusals(everywhere, RANGES) == [
        "layers.0.mlp.down_proj (W4A16Proj, family ffn; every profile): why"]
    some = {(op, "why"): [RANGES[3], RANGES[4]]}
    assert describe_refusals(some, RANGES) == [
        "layers.0.mlp.down_proj (W4A16Proj, family ffn; rows 33-128, rows 129-4096): why"]
