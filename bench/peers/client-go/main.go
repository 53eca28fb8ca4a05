// Command leadergroup-bench-client-go is a benchmark peer: one candidate process running client-go's
// tools/leaderelection with a LeaseLock for each of --groups Leases, as a controller Deployment's
// replica would. It prints one line per leadership change to stdout:
//
//	<unix nanoseconds> started|stopped <lease name> <identity>
//
// SIGTERM cancels the context; with ReleaseOnCancel the leader releases its Leases before exiting.
//
// It also runs in a pod (the image `images/build.sh client-go`): with no kubeconfig it uses the
// pod's ServiceAccount (in-cluster config), and the namespace and the identity default to
// POD_NAMESPACE and POD_NAME (the downward API). Like a controller's replica, it exits once it
// has stopped leading every Lease (client-go's RunOrDie returns then).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	namespace := flag.String("namespace", envOr("POD_NAMESPACE", "default"), "namespace of the Leases")
	prefix := flag.String("lease-prefix", "bench", "Leases are named <prefix>-<index>")
	groups := flag.Int("groups", 1, "number of Leases (groups) this candidate runs for")
	identity := flag.String("identity", os.Getenv("POD_NAME"), "this candidate's identity")
	leaseDuration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	renewDeadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retryPeriod := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	qps := flag.Float64("qps", 0, "client QPS (0: client-go's default)")
	flag.Parse()

	if *identity == "" {
		// Two candidates with one empty identity would both believe they hold the Lease.
		fmt.Fprintln(os.Stderr, "no identity: set --identity or POD_NAME")
		os.Exit(2)
	}
	// An empty path means the in-cluster config (the pod's ServiceAccount).
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(2)
	}
	if *qps > 0 {
		// Many electors in one process share one client: its default rate limit (5 QPS) would
		// throttle them, which no single-elector replica experiences.
		config.QPS = float32(*qps)
		config.Burst = int(*qps) * 2
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}

	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-signals; cancel() }()

	var out sync.Mutex
	say := func(event, lease string) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf("%d %s %s %s\n", time.Now().UnixNano(), event, lease, *identity)
	}

	var wg sync.WaitGroup
	for i := 0; i < *groups; i++ {
		name := fmt.Sprintf("%s-%d", *prefix, i)
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: *namespace},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: *identity},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
				Lock:            lock,
				LeaseDuration:   *leaseDuration,
				RenewDeadline:   *renewDeadline,
				RetryPeriod:     *retryPeriod,
				ReleaseOnCancel: true,
				Name:            name,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { say("started", name) },
					OnStoppedLeading: func() { say("stopped", name) },
				},
			})
		}()
	}
	wg.Wait()
}

// envOr is the environment variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
