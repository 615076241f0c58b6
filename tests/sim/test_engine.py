"""The stream scheduler on programs drawn by hand."""

import pytest

from madmax.sim import Program, Segment, schedule


def test_three_ops_two_streams():
    # compute: A [0,2) then C; comm: B waits for A -> [2,5); C waits for B -> starts at 5, ends 6.
    tl = Program()
    compute, comm = tl.stream("r0", "compute"), tl.stream("r0", "comm")
    a = tl.add(compute, 2.0)
    b = tl.add(comm, 3.0, (a,))
    c = tl.add(compute, 1.0, (b,))
    s = schedule(tl)
    assert (s.start_s[b], s.end_s[b]) == (2.0, 5.0)
    assert (s.start_s[c], s.end_s[c]) == (5.0, 6.0)
    assert s.makespan_s == 6.0


def test_stream_order_and_late_dependency():
    # Two tasks on one stream run in order even without dependencies; `depend` adds a later edge.
    tl = Program()
    x, y = tl.stream("r0", "x"), tl.stream("r1", "y")
    first = tl.add(x, 1.0)
    second = tl.add(x, 1.0)
    other = tl.add(y, 4.0)
    tl.wait(first, other)
    s = schedule(tl)
    assert s.start_s[first] == 4.0
    assert s.end_s[second] == 6.0


def test_cycle_is_a_bug():
    tl = Program()
    x, y = tl.stream("r0", "x"), tl.stream("r0", "y")
    a = tl.add(x, 1.0)
    b = tl.add(y, 1.0, (a,))
    tl.wait(a, b)
    with pytest.raises(AssertionError):
        schedule(tl)


def test_segments_read_back_as_written():
    # Streams are made per (rank, name) on first use; segments keep their rank, stream and dependencies.
    program = Program()
    a = program.add(program.stream("stage0", "compute"), 2.0, label="fwd", category="forward")
    program.add(program.stream("stage0", "ep"), 1.0, (a,), label="dispatch", category="ep.all_to_all")
    assert list(program.segments()) == [
        Segment("stage0", "compute", 2.0, (), "fwd", "forward"),
        Segment("stage0", "ep", 1.0, (a,), "dispatch", "ep.all_to_all")]
    assert program.stream_names == [("stage0", "compute"), ("stage0", "ep")]
