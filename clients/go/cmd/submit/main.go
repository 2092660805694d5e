// Command submit creates a batch job and waits for it to finish.
//
//	go run ./cmd/submit [-pool /default] [-instances 3] [-cpu-millis 100] [-env K=V] NAME -- COMMAND [ARGS...]
//
// It prints the job id, then the final state and task counts, and exits 0
// only if the job SUCCEEDED. Server, token and CA come from PACELINE_SERVER,
// PACELINE_TOKEN and PACELINE_CA_CERT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	pb "github.com/paceline/paceline/clients/go/gen/paceline/v1"
	"github.com/paceline/paceline/clients/go/paceline"
	"google.golang.org/grpc/status"
)

type envFlags map[string]string

func (e envFlags) String() string { return fmt.Sprint(map[string]string(e)) }
func (e envFlags) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("%q is not KEY=VALUE", kv)
	}
	e[k] = v
	return nil
}

func main() {
	pool := flag.String("pool", "/default", "pool")
	instances := flag.Uint("instances", 3, "instances")
	cpu := flag.Uint64("cpu-millis", 100, "CPU millicores per instance")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait")
	env := envFlags{}
	flag.Var(env, "env", "KEY=VALUE for the tasks (repeatable)")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: submit [flags] NAME -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	name, command := flag.Arg(0), flag.Args()[1:]
	c, err := paceline.Connect(paceline.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	spec := &pb.JobSpec{
		Name: name, Pool: *pool, Kind: pb.JobKind_JOB_KIND_BATCH, InstanceCount: uint32(*instances),
		DefaultTask: &pb.TaskSpec{Command: command[0], Args: command[1:], Env: env,
			Resources: &pb.Resources{CpuMillis: *cpu, MemoryMib: 32, DiskMib: 10}},
	}
	created, err := c.Jobs.CreateJob(ctx, &pb.CreateJobRequest{Spec: spec})
	if err != nil {
		s, _ := status.FromError(err)
		fmt.Fprintf(os.Stderr, "error: %s: %s\n", s.Code(), s.Message())
		os.Exit(1)
	}
	fmt.Println("job", created.Id)
	for {
		got, err := c.Jobs.GetJob(ctx, &pb.GetJobRequest{Id: created.Id})
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		st := got.Job.GetStatus()
		switch st.GetState() {
		case pb.JobState_JOB_STATE_SUCCEEDED, pb.JobState_JOB_STATE_FAILED, pb.JobState_JOB_STATE_KILLED:
			state := strings.TrimPrefix(st.GetState().String(), "JOB_STATE_")
			var counts []string
			for k, v := range st.GetTaskCounts() {
				counts = append(counts, fmt.Sprintf("%s=%d", k, v))
			}
			sort.Strings(counts)
			fmt.Println("state", state, strings.Join(counts, " "))
			if state != "SUCCEEDED" {
				os.Exit(1)
			}
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}
