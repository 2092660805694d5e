#!/usr/bin/env python3
"""Submits a batch job and waits for it to finish.

    python3 submit.py NAME [--pool /default] [--instances 3] [--cpu-millis 100] -- COMMAND [ARGS...]

Prints the job id, then its final state and task counts; exits 0 only if the
job SUCCEEDED. Server, token and CA come from PACELINE_SERVER, PACELINE_TOKEN
and PACELINE_CA_CERT.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
import paceline_client as pc  # noqa: E402

TERMINAL = {pc.job_pb2.JOB_STATE_SUCCEEDED, pc.job_pb2.JOB_STATE_FAILED, pc.job_pb2.JOB_STATE_KILLED}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name")
    p.add_argument("--pool", default="/default")
    p.add_argument("--instances", type=int, default=3)
    p.add_argument("--cpu-millis", type=int, default=100)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the tasks")
    p.add_argument("command", nargs="+")
    a = p.parse_args()

    try:
        client = pc.connect()
    except (ValueError, OSError) as e:  # an https server without a readable CA certificate
        print("error:", e, file=sys.stderr)
        return 1
    task = pc.types_pb2.TaskSpec(
        command=a.command[0], args=a.command[1:],
        env=dict(kv.split("=", 1) for kv in a.env),
        resources=pc.types_pb2.Resources(cpu_millis=a.cpu_millis, memory_mib=32, disk_mib=10))
    spec = pc.job_pb2.JobSpec(name=a.name, pool=a.pool, kind=pc.job_pb2.JOB_KIND_BATCH,
                              instance_count=a.instances, default_task=task)
    try:
        job_id = client.jobs.CreateJob(pc.job_pb2.CreateJobRequest(spec=spec)).id
    except grpc.RpcError as e:
        print("error: %s: %s" % (e.code().name, e.details()), file=sys.stderr)
        return 1
    print("job", job_id, flush=True)
    deadline = time.time() + a.timeout
    while True:
        job = client.jobs.GetJob(pc.job_pb2.GetJobRequest(id=job_id)).job
        if job.status.state in TERMINAL:
            break
        if time.time() > deadline:
            print("error: job %s not finished after %ss" % (job_id, a.timeout), file=sys.stderr)
            return 1
        time.sleep(0.3)
    state = pc.job_pb2.JobState.Name(job.status.state).replace("JOB_STATE_", "")
    counts = " ".join("%s=%d" % kv for kv in sorted(job.status.task_counts.items()))
    print("state", state, counts)
    return 0 if state == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
