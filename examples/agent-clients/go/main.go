// Command agent-role follows this pod's role through the leadergroup-agent's long poll and leads
// only while the pod is the leader. Go's standard library only.
//
//	LEADERGROUP_AGENT=http://127.0.0.1:8686 go run ./examples/agent-clients/go
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"time"
)

// State is the agent's answer to GET /role.
type State struct {
	Role    string `json:"role"`
	Epoch   *int64 `json:"epoch"`
	Version string `json:"version"`
}

var client = &http.Client{Timeout: 70 * time.Second}

// poll returns the agent's state once its version differs from version, or after 60 s; unknown
// when the agent cannot be reached.
func poll(agent, version string) State {
	query := url.Values{"wait": {version}, "timeoutSeconds": {"60"}}
	answer, err := client.Get(agent + "/role?" + query.Encode())
	if err == nil {
		defer answer.Body.Close()
		var state State
		if answer.StatusCode == http.StatusOK && json.NewDecoder(answer.Body).Decode(&state) == nil {
			return state
		}
	}
	// The agent is gone or does not answer: nothing is confirmed.
	time.Sleep(time.Second)
	return State{Role: "unknown"}
}

func main() {
	agent := os.Getenv("LEADERGROUP_AGENT")
	if agent == "" {
		agent = "http://127.0.0.1:8686"
	}
	version, last := "", ""
	var stop context.CancelFunc = func() {}
	for {
		state := poll(agent, version)
		version = state.Version
		epoch := ""
		if state.Role == "leader" && state.Epoch != nil {
			epoch = fmt.Sprint(*state.Epoch)
		}
		line := fmt.Sprintf("role=%s epoch=%s", state.Role, epoch)
		if line == last {
			continue
		}
		last = line
		fmt.Println(line)
		// Stop first: anything but leader means stop acting now, including unknown.
		stop()
		if state.Role == "leader" {
			var ctx context.Context
			ctx, stop = context.WithCancel(context.Background())
			go lead(ctx, *state.Epoch)
		}
	}
}

// lead does the leader's work until ctx ends, presenting epoch to every write it makes (the
// book's Fencing writes).
func lead(ctx context.Context, epoch int64) {
	<-ctx.Done()
}
