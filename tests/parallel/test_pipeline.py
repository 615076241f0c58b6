"""Pipeline split and schedules against their definitions."""

from madmax.parallel.pipeline import Phase, peak_in_flight, schedule, split_layers


def test_llama_405b_split_puts_embedding_and_head_in_place_of_a_layer():
    # 126 layers + embedding + head = 128 = 16 stages x 4 chunks x 2: ends get 1 layer, the rest 2.
    counts = split_layers(126, 64)
    assert counts[0] == counts[-1] == 1
    assert set(counts[1:-1]) == {2}
    assert sum(counts) == 126


def test_uneven_split_favours_middle():
    assert split_layers(10, 4) == [2, 3, 3, 2]
    assert split_layers(8, 4) == [2, 2, 2, 2]


def test_1f1b_counts_and_warmup():
    steps = schedule(stage=0, pp=4, vp=1, microbatches=8)
    assert [s.phase for s in steps[:3]] == [Phase.FORWARD] * 3
    assert sum(s.phase is Phase.FORWARD for s in steps) == 8
    assert sum(s.phase is Phase.BACKWARD for s in steps) == 8
    # Stage s keeps at most pp - s micro-batches in flight.
    for stage in range(4):
        assert peak_in_flight(schedule(stage, 4, 1, 8), [1.0]) == 4 - stage


def test_interleaved_covers_every_chunk_and_microbatch_once():
    steps = schedule(stage=1, pp=4, vp=2, microbatches=8)
    fwd = {(s.microbatch, s.chunk) for s in steps if s.phase is Phase.FORWARD}
    bwd = {(s.microbatch, s.chunk) for s in steps if s.phase is Phase.BACKWARD}
    assert fwd == bwd == {(m, c) for m in range(8) for c in range(2)}
    # Backward of a (micro-batch, chunk) never precedes its forward.
    seen = set()
    for s in steps:
        if s.phase is Phase.FORWARD:
            seen.add((s.microbatch, s.chunk))
        else:
            assert (s.microbatch, s.chunk) in seen
