module leadergroup.io/examples/agent-role

go 1.22
