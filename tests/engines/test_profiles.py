"""Row-count profiles: parsing, errors, the profile of an M, and the optimization profiles."""

import pytest

from metrale_export.engines.profiles import (
    DEFAULT_PROFILES,
    ProfileError,
    RowRange,
    format_profiles,
    optimization_profiles,
    parse_profiles,
    profile_for,
)

MODEL_INPUTS = {
    "input_ids": ["batch", "seq"],
    "position_ids": ["batch", "seq"],
    "past_key.0": ["batch", 2, "past", 64],
    "past_value.0": ["batch", 2, "past", 64],
}


def test_default_spec_parses_and_round_trips():
    ranges = parse_profiles(DEFAULT_PROFILES)
    assert ranges == (RowRange(1, 1), RowRange(2, 8), RowRange(9, 32), RowRange(33, 128),
                      RowRange(129, 4096))
    assert format_profiles(ranges) == DEFAULT_PROFILES
    assert parse_profiles(" 1 , 2 - 8 ") == (RowRange(1, 1), RowRange(2, 8))


@pytest.mark.parametrize(
    "spec, words",
    [
        ("", "empty"),
        ("0,1-8", "start at 1"),
        ("8-2", "ends before it starts"),
        ("1,1-8", "overlaps"),
        ("1-8,4-16", "overlaps"),
        ("9-32,1-8", "comes before"),
        ("1,x", "'x'"),
        ("1,-3", "'-3'"),
        ("1,2-8,,9", "''"),
        ("1,2-4000000000", "largest dimension"),
    ],
)
def test_bad_specs_say_what_and_where(spec, words):
    with pytest.raises(ProfileError, match="--profiles") as e:
        parse_profiles(spec)
    assert words in str(e.value)


def test_model_limit():
    assert parse_profiles("1,2-4096", max_rows=4096)[-1] == RowRange(2, 4096)
    with pytest.raises(ProfileError, match="limit of 2048 rows"):
        parse_profiles("1,2-4096", max_rows=2048)


@pytest.mark.parametrize("m, label", [(1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-32"), (4096, "129-4096")])
def test_profile_for(m, label):
    rows, reason = profile_for(m, parse_profiles(DEFAULT_PROFILES))
    assert rows is not None and rows.label == label, reason


@pytest.mark.parametrize("m, words", [(0, "at least 1"), (5000, "largest"), (10, "between 2-8 and 16-32")])
def test_profile_for_refuses_with_reason(m, words):
    rows, reason = profile_for(m, parse_profiles("1,2-8,16-32"))
    assert rows is None and words in reason


def test_model_graph_gets_decode_and_prefill():
    decode, prefill = optimization_profiles(MODEL_INPUTS, RowRange(9, 32), max_context=1024)
    assert decode.name == "decode" and prefill.name == "prefill"
    assert decode.shapes["input_ids"] == ((9, 1), (32, 1), (32, 1))
    assert prefill.shapes["input_ids"] == ((1, 9), (1, 32), (1, 32))
    assert decode.shapes["past_key.0"] == ((9, 2, 0, 64), (32, 2, 512, 64), (32, 2, 1024, 64))
    assert prefill.shapes["past_value.0"] == ((1, 2, 0, 64), (1, 2, 0, 64), (1, 2, 1024, 64))
    # M = batch * seq stays within the range at min and max in both profiles.
    for p in (decode, prefill):
        lo, _, hi = p.shapes["input_ids"]
        assert lo[0] * lo[1] == 9 and hi[0] * hi[1] == 32


def test_single_row_profile_is_decode_only():
    (only,) = optimization_profiles(MODEL_INPUTS, RowRange(1, 1))
    assert only.name == "decode" and only.shapes["input_ids"] == ((1, 1), (1, 1), (1, 1))


def test_model_profile_errors():
    with pytest.raises(ProfileError, match="longer than --max-context 64"):
        optimization_profiles(MODEL_INPUTS, RowRange(33, 128), max_context=64)
    with pytest.raises(ProfileError, match="past_key.0: dimension 1 of .* is 'h'; the exported model "
                                           "interface names only batch, seq, past"):
        optimization_profiles({**MODEL_INPUTS, "past_key.0": ["batch", "h", "past", 64]}, RowRange(1, 1))
    with pytest.raises(ProfileError, match="attention_mask: dimension 1 .* is 'all'"):
        optimization_profiles({**MODEL_INPUTS, "attention_mask": ["batch", "all"]}, RowRange(1, 1))
    with pytest.raises(ProfileError, match="conv_state.0: dimension 2 .* is None"):
        optimization_profiles({**MODEL_INPUTS, "conv_state.0": ["batch", 512, None]}, RowRange(1, 1))
    with pytest.raises(ProfileError, match=r"input_ids: expected \[batch, seq\]"):
        optimization_profiles({**MODEL_INPUTS, "input_ids": ["seq", "batch"]}, RowRange(1, 1))


def test_gdn_states_follow_the_batch():
    """Qwen3-Next: the conv and recurrent states of a Gated DeltaNet layer have one dynamic
    dimension, the batch, and sit beside the attention layers' KV cache."""
    inputs = {**MODEL_INPUTS, "conv_state.1": ["batch", 512, 3], "recurrent_state.1": ["batch", 4, 64, 64]}
    decode, prefill = optimization_profiles(inputs, RowRange(2, 8), max_context=256)
    assert decode.shapes["conv_state.1"] == ((2, 512, 3), (8, 512, 3), (8, 512, 3))
    assert prefill.shapes["conv_state.1"] == ((1, 512, 3),) * 3
    assert decode.shapes["recurrent_state.1"] == ((2, 4, 64, 64), (8, 4, 64, 64), (8, 4, 64, 64))
    assert decode.shapes["past_key.0"] == ((2, 2, 0, 64), (8, 2, 128, 64), (8, 2, 256, 64))


def test_rows_graph_profile():
    (p,) = optimization_profiles({"x": ["M", 128]}, RowRange(2, 8))
    assert p.name == "rows" and p.shapes["x"] == ((2, 128), (8, 128), (8, 128))
    with pytest.raises(ProfileError, match="exactly one dynamic dimension"):
        optimization_profiles({"x": ["M", "K"]}, RowRange(2, 8))
