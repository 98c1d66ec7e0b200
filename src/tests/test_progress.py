"""Live progress board: lines on finished cases and at intervals, the shared JSON entries, and
the table `python -m meshtest progress` prints."""
from __future__ import annotations

import io
import os

from meshtest.parent.progress import INTERVAL_S, ProgressBoard, format_board, read_board


def test_board_lines_entries_and_table(tmp_path):
    now = [1000.0]
    out = io.StringIO()
    board = ProgressBoard(str(tmp_path), "cases/torch:case_sort.py", 10, out, clock=lambda: now[0])
    board.update(0, "w2-2", "sort_a")
    board.update(0, "w2-2", "sort_a")  # nothing new: no line
    now[0] += INTERVAL_S + 1
    board.update(0, "w2-2", "sort_b")  # time passed, another case runs: the board file only
    assert read_board(str(tmp_path))[0]["current"] == "sort_b"
    board.update(3, "w2-2", "sort_d")  # another tenth done: a line
    board.update(3, "w2-2, w4-4", "sort_d")  # another launch in flight: a line
    board.update(3, "w2-2, w4-4", "sort_e")
    lines = out.getvalue().splitlines()
    assert lines == [
        "progress cases/torch:case_sort.py: 0/10 case(s) done, launch w2-2, running sort_a (0s)",
        "progress cases/torch:case_sort.py: 3/10 case(s) done, launch w2-2, running sort_d (16s)",
        "progress cases/torch:case_sort.py: 3/10 case(s) done, launch w2-2, w4-4, running sort_d (16s)",
    ]
    (entry,) = read_board(str(tmp_path))
    assert (entry["done"], entry["total"], entry["current"], entry["finished"], entry["pid"]) == (3, 10, "sort_d",
                                                                                                  False, os.getpid())
    assert format_board([entry], now=now[0]) == [
        "running     3/10   cases/torch:case_sort.py  launch w2-2, w4-4  running sort_d  (16s since start)"]
    board.finish(10)
    (entry,) = read_board(str(tmp_path))
    assert entry["finished"] and entry["done"] == 10
    assert format_board([dict(entry, pid=2 ** 22 + 12345, finished=False)], now=now[0])[0].startswith("gone")
    assert format_board([]) == ["no meshtest run has written progress here"]
