// unmarked.go: a Go program nobody marked, for fsprof's built-in rules over Go's standard
// library (tests/tests/rules.rs). It spends its time in sorting (sort.Ints), formatting
// (fmt.Sprintf), serialization (encoding/json both ways), compiling regular expressions and
// matching them (regexp), and in its own work between them, and times each itself.
//
//	unmarked SECONDS TRUTH_FILE
//
// The truth: total_ms (the loop's wall time: one goroutine on one processor, the collector run
// between rounds only, untimed; plus the other threads' time running or waiting for a CPU
// meanwhile, given apart as extra.other_threads_ms) and features.NAME.ms. GOMAXPROCS is 1 and
// automatic collection off, so that no other goroutine runs inside a timed region. The other
// threads' time is the runtime's monitor's (sysmon, no processor needed): it wakes every 10 ms
// or so, and each wake-up waits for a CPU beside the busy loop, time fsprof counts as any
// runnable time is: 343 ms in a 4.3 s run with a hypervisor taking a sixth of the CPUs, every
// share then 8% below a truth of the loop alone.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"
)

type record struct {
	ID    int               `json:"id"`
	Name  string            `json:"name"`
	Tags  []string          `json:"tags"`
	Attrs map[string]string `json:"attrs"`
}

var sink int

// Each thread's time on a CPU plus its time queued for one so far (schedstat's first two
// fields, ns), by thread id.
func threadTimes() map[string]float64 {
	times := map[string]float64{}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		stat, err := os.ReadFile("/proc/self/task/" + task.Name() + "/schedstat")
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat))
		if len(fields) < 2 {
			continue
		}
		run, _ := strconv.ParseFloat(fields[0], 64)
		wait, _ := strconv.ParseFloat(fields[1], 64)
		times[task.Name()] = run + wait
	}
	return times
}

//go:noinline
func spin(d time.Duration) {
	end := time.Now().Add(d)
	x := 1
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			x = x*31 + i
		}
	}
	sink += x
}

func main() {
	runtime.GOMAXPROCS(1)
	debug.SetGCPercent(-1)
	seconds, _ := strconv.ParseFloat(os.Args[1], 64)
	numbers := make([]int, 20000)
	sorted := make([]int, len(numbers))
	for i := range numbers {
		numbers[i] = (i * 7919) % 20011
	}
	records := make([]record, 200)
	for i := range records {
		records[i] = record{ID: i, Name: "record " + strconv.Itoa(i), Tags: []string{"a", "b", "c"},
			Attrs: map[string]string{"k": "v", "x": strconv.Itoa(i)}}
	}
	text := ""
	for i := 0; i < 200; i++ {
		text += fmt.Sprintf("user%d@host%d.example.com some words between ", i, i%7)
	}
	// Made once: boxing a call's arguments into interfaces allocates, outside fmt.
	arguments := make([][]interface{}, 2000)
	for i := range arguments {
		arguments[i] = []interface{}{float64(i) * 1.618, i, i * 31, records[i%10].Tags}
	}
	patterns := []string{`(\w+)@(\w+)\.example\.com`, `[a-z]+\d+`, `(?i)some\s+words`, `^(\d{3})-(\d{4})$`}
	var sorting, formatting, serializing, compiling, matching time.Duration
	before := threadTimes()
	start := time.Now()
	for time.Since(start).Seconds() < seconds {
		copy(sorted, numbers)
		t := time.Now()
		sort.Ints(sorted)
		sorting += time.Since(t)

		t = time.Now()
		for i := range arguments {
			sink += len(fmt.Sprintf("%8.3f %d %x %v", arguments[i]...))
		}
		formatting += time.Since(t)

		t = time.Now()
		data, _ := json.Marshal(records)
		var back []record
		_ = json.Unmarshal(data, &back)
		sink += len(back)
		serializing += time.Since(t)

		t = time.Now()
		compiled := make([]*regexp.Regexp, 0, 40)
		for i := 0; i < 10; i++ {
			for _, p := range patterns {
				compiled = append(compiled, regexp.MustCompile(p))
			}
		}
		compiling += time.Since(t)

		t = time.Now()
		sink += len(compiled[0].FindAllString(text, -1))
		matching += time.Since(t)

		spin(3 * time.Millisecond)
		runtime.GC()
	}
	total := time.Since(start)
	// The loop's thread is the one that ran most; the others' time is added.
	grew := map[string]float64{}
	loop := ""
	for tid, now := range threadTimes() {
		grew[tid] = now - before[tid]
		if loop == "" || grew[tid] > grew[loop] {
			loop = tid
		}
	}
	others := 0.0
	for tid, ns := range grew {
		if tid != loop {
			others += ns / 1e6
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	truth := map[string]interface{}{
		"total_ms": ms(total) + others,
		"extra":    map[string]float64{"other_threads_ms": others},
		"features": map[string]interface{}{
			"sorting":       map[string]float64{"ms": ms(sorting)},
			"formatting":    map[string]float64{"ms": ms(formatting)},
			"serialization": map[string]float64{"ms": ms(serializing)},
			"regex-compile": map[string]float64{"ms": ms(compiling)},
			"regex-match":   map[string]float64{"ms": ms(matching)},
		},
	}
	out, _ := json.Marshal(truth)
	if err := os.WriteFile(os.Args[2], out, 0o644); err != nil {
		panic(err)
	}
}
