"""The Spark application the end-to-end test runs against Paceline
(scripts/spark-e2e). Plain PySpark: the only Paceline thing is the master
URL and the `spark.paceline.*` settings, given on the command line.

    python app.py MODE --master paceline://HOST:PORT [--conf k=v ...]

Modes (each prints one line `RESULT {json}` and exits 0 when its results
are right, 1 when not):
  wordcount-pi  a word count with a shuffle over generated text, checked
                against the same count in plain Python, and a SparkPi
  dynamic       a backlog of slow tasks (the executor job should grow),
                then idle until Spark is down to its minimum executors
  slow-count    the word count with slow tasks (for the pool limit and the
                executor-kill tests; E2E_SLOW_SECS seconds per partition of
                16, default 2); prints `STAGE-RUNNING` once its slow stage
                has tasks running. With E2E_RELEASE_FILE set, the tasks stop
                being slow once that file exists: the test creates it when
                it has seen what it waited for (scripts/spark-e2e --short),
                so the rest of the stage runs at full speed.
"""

import json
import os
import random
import sys
import time
from collections import Counter
from operator import add

from pyspark import SparkConf
from pyspark.sql import SparkSession

WORDS = ["paceline", "spark", "pool", "executor", "shuffle", "driver", "task", "host", "gang", "slack"]


def text(lines: int, seed: int = 7) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 12))) for _ in range(lines)]


def word_count(sc, lines, partitions, sleep_s=0.0, release=None):
    def slow(x):
        # The executors run on this machine, so they see the driver's file.
        if sleep_s and not (release and os.path.exists(release)):
            time.sleep(sleep_s)
        return x

    rdd = sc.parallelize(lines, partitions).map(slow).flatMap(str.split).map(lambda w: (w, 1))
    # reduceByKey: a shuffle between executors.
    return dict(rdd.reduceByKey(add, 4).collect())


def spark_pi(sc, samples, partitions):
    def inside(i):
        rnd = random.Random(i)
        x, y = rnd.random() * 2 - 1, rnd.random() * 2 - 1
        return 1 if x * x + y * y <= 1 else 0

    hits = sc.parallelize(range(samples), partitions).map(inside).reduce(add)
    return 4.0 * hits / samples


def executors(sc) -> int:
    # Registered executors, as the driver's scheduler backend counts them.
    return sc._jsc.sc().getExecutorIds().size()


def main(argv):
    mode = argv[1]
    conf = SparkConf().setAppName(f"e2e-{mode}")
    args = argv[2:]
    while args:
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--master":
            conf.setMaster(value)
        elif flag == "--conf":
            k, v = value.split("=", 1)
            conf.set(k, v)
        else:
            raise SystemExit(f"unknown flag {flag}")
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    sc = spark.sparkContext
    result = {"mode": mode}
    ok = True
    try:
        lines = text(int(os.environ.get("E2E_LINES", "2000")))
        expected = dict(Counter(w for line in lines for w in line.split()))
        if mode == "wordcount-pi":
            counts = word_count(sc, lines, 8)
            pi = spark_pi(sc, 200_000, 8)
            result.update(words=len(counts), total=sum(counts.values()), pi=pi)
            ok = counts == expected and abs(pi - 3.14159) < 0.02
        elif mode == "dynamic":
            result["executors_at_start"] = executors(sc)
            # A backlog: 24 tasks of 1.5 s with one core per executor.
            counts = word_count(sc, lines, 24, sleep_s=1.5 / (len(lines) / 24))
            result["busy_done_at"] = time.time()
            print("BUSY-DONE", flush=True)
            ok = counts == expected
            minimum = int(conf.get("spark.dynamicAllocation.minExecutors", "0"))
            deadline = time.time() + 90
            while executors(sc) > minimum and time.time() < deadline:
                time.sleep(0.5)
            result["executors_after_idle"] = executors(sc)
            result["shrunk_at"] = time.time()
            print("SHRUNK", flush=True)
            ok = ok and result["executors_after_idle"] == minimum
            # Leave the test time to see the shrink through Paceline's API.
            time.sleep(4)
        elif mode == "slow-count":
            sc.setJobGroup("slow", "slow word count")
            import threading

            def announce():
                tracker = sc.statusTracker()
                while True:
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info and info.numActiveTasks > 0:
                            print("STAGE-RUNNING", flush=True)
                            return
                    time.sleep(0.2)

            threading.Thread(target=announce, daemon=True).start()
            per_partition = float(os.environ.get("E2E_SLOW_SECS", "2.0"))
            counts = word_count(sc, lines, 16, sleep_s=per_partition / (len(lines) / 16),
                                release=os.environ.get("E2E_RELEASE_FILE") or None)
            result.update(words=len(counts), total=sum(counts.values()))
            ok = counts == expected
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        result["ok"] = ok
        print("RESULT " + json.dumps(result), flush=True)
        spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
