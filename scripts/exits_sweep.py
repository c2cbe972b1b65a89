#!/usr/bin/python3
"""Early exits, swept independently of tracr (#44).

Reads a run's frames straight from the SQLite results database and, per
placement and threshold, decides every frame as the issue defines it: the
first exit whose stored confidence reaches the threshold ends the frame; a
frame no exit takes is sent (its answer the run's own, when the run sent it;
unknown when the run ended it at an exit). Prints tidy CSV with the columns
`tracrctl results exits --csv` writes for the same counts, so the two can be
compared sample for sample (tests/system/test_exits.cpp does).

  scripts/exits_sweep.py DB RUN_ID THRESHOLD[,THRESHOLD...] [max_softmax|entropy]
"""
import sqlite3
import struct
import sys


def f32(x):
    """The float32 the run compared (stored with 9 significant digits)."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def main():
    db, run, ts = sys.argv[1], int(sys.argv[2]), [float(t) for t in sys.argv[3].split(",")]
    measure = sys.argv[4] if len(sys.argv) > 4 else "max_softmax"
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT COALESCE(placement, split), exit_index, exit_results, correct, label FROM frames "
        "WHERE run_id = ? AND ok = 1 AND warmup = 0 AND batch = 1 ORDER BY frame",
        (run,)).fetchall()
    exits = 0
    frames = {}
    for placement, exit_index, results, correct, label in rows:
        answers = []
        for one in (results or "").split():
            e, rest = one.split("=")
            top1, ms, ec = rest.split(":")
            answers.append((int(e), int(top1), f32(ms), f32(ec)))
            exits = max(exits, int(e) + 1)
        frames.setdefault(str(placement), []).append((exit_index, answers, correct, label))
    print("placement,threshold,frames,sent,unknown,labelled,correct," + ",".join(f"exited_{e}" for e in range(exits)))
    for placement, fs in frames.items():
        for t in ts:
            exited = [0] * exits
            sent = unknown = labelled = correct_n = 0
            for exit_index, answers, correct, label in fs:
                judged = correct is not None and correct >= 0
                taken = next((a for a in answers if (a[3] if measure == "entropy" else a[2]) >= t), None)
                if taken:
                    exited[taken[0]] += 1
                    if judged:
                        labelled += 1
                        correct_n += int(taken[1] == int(label))
                elif exit_index is not None:
                    unknown += 1
                else:
                    sent += 1
                    if judged:
                        labelled += 1
                        correct_n += correct
            print(f"{placement},{t:g},{len(fs)},{sent},{unknown},{labelled},{correct_n}," +
                  ",".join(str(x) for x in exited))


if __name__ == "__main__":
    main()
