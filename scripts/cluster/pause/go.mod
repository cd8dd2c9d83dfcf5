module gprobe.dev/cluster/pause

go 1.25.0
