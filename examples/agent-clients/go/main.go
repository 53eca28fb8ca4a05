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
	"sync/atomic"
	"time"
)

// State is the agent's answer to GET /role.
type State struct {
	Role  string `json:"role"`
	Epoch *int64 `json:"epoch"`
	// ValidUntil is, while leader, the Unix time in milliseconds (this node's clock) from which
	// the answer no longer holds unless a newer one came.
	ValidUntil *int64 `json:"validUntil"`
	Version    string `json:"version"`
}

// deadline is when state stops holding: a leader's validUntil, or never (the zero time).
func (s State) deadline() time.Time {
	if s.Role != "leader" {
		return time.Time{}
	}
	if s.ValidUntil == nil {
		return time.Unix(0, 0)
	}
	return time.UnixMilli(*s.ValidUntil)
}

var client = &http.Client{Timeout: 70 * time.Second}

// holds is the last answer's deadline in Unix milliseconds: the leader's work checks it before
// each write, since a paused agent sends no answer that would stop it.
var holds atomic.Int64

// poll returns the agent's state once its version differs from version, or after 60 s; unknown
// when the agent cannot be reached, or when no answer came before holds (the last answer's
// deadline: the agent may be paused).
func poll(agent, version string, holds time.Time) State {
	ctx := context.Background()
	if !holds.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, holds)
		defer cancel()
	}
	query := url.Values{"wait": {version}, "timeoutSeconds": {"60"}}
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, agent+"/role?"+query.Encode(), nil)
	if err == nil {
		answer, err := client.Do(request)
		if err == nil {
			defer answer.Body.Close()
			var state State
			if answer.StatusCode == http.StatusOK && json.NewDecoder(answer.Body).Decode(&state) == nil {
				return state
			}
		}
		if ctx.Err() != nil {
			// The leader's answer stopped holding before a new one came.
			return State{Role: "unknown"}
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
	state, last := State{Role: "unknown"}, ""
	var stop context.CancelFunc = func() {}
	for {
		state = poll(agent, state.Version, state.deadline())
		if d := state.deadline(); !d.IsZero() && !time.Now().Before(d) {
			// Answered, but no longer holds.
			state = State{Role: "unknown", Version: state.Version}
		}
		holds.Store(state.deadline().UnixMilli())
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
// book's Fencing writes), and only while the last answer holds.
func lead(ctx context.Context, epoch int64) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if time.Now().UnixMilli() >= holds.Load() {
				continue // the answer no longer holds: no write until a newer one
			}
			_ = epoch // a write here presents epoch
		}
	}
}
