package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

const usage = `lincheck: checks recorded histories of SET, GET and INCR for linearizability

Usage: lincheck [-timeout DURATION] [-html FILE] HISTORY.json...

Prints one line per history and a total. Exit status: 0 every history is
linearizable; 1 a violation (with -html, porcupine's visualization of the
first one is written to FILE); 2 bad input, or a check that did not finish
within the timeout.
`

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "the longest one history may take to check")
	html := flag.String("html", "", "write the visualization of the first violation to this file")
	flag.Usage = func() { fmt.Fprint(os.Stderr, usage); flag.PrintDefaults() }
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	status := 0
	var total Counts
	checked, violations, undecided, kills, partitions, changes := 0, 0, 0, 0, 0, 0
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: %v\n", err)
			os.Exit(2)
		}
		h, ops, c, err := Read(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "lincheck: %s: %v\n", path, err)
			os.Exit(2)
		}
		start := time.Now()
		res, info := porcupine.CheckOperationsVerbose(Model, ops, *timeout)
		checked++
		total.Ops += c.Ops
		total.Indeterminate += c.Indeterminate
		total.DroppedReads += c.DroppedReads
		kills += h.Faults["kills"]
		partitions += h.Faults["partitions"]
		changes += h.Faults["membership"]
		fmt.Printf("%s: %d operations (%d indeterminate writes; %d failed and %d unanswered reads left out) on %d keys: %s in %.2f s\n",
			path, c.Ops, c.Indeterminate, c.Failed, c.DroppedReads, c.Keys, verdict(res), time.Since(start).Seconds())
		switch res {
		case porcupine.Illegal:
			violations++
			status = 1
			if *html != "" && violations == 1 {
				if err := porcupine.VisualizePath(Model, info, *html); err != nil {
					fmt.Fprintf(os.Stderr, "lincheck: writing %s: %v\n", *html, err)
				} else {
					fmt.Printf("visualization of the violation: %s\n", *html)
				}
			}
		case porcupine.Unknown:
			undecided++
			if status == 0 {
				status = 2
			}
		}
	}
	fmt.Printf("operations recorded: %d (indeterminate writes: %d), faults injected: %d kills, %d partitions, %d membership changes, "+
		"histories checked: %d, violations: %d, undecided: %d\n",
		total.Ops, total.Indeterminate, kills, partitions, changes, checked, violations, undecided)
	os.Exit(status)
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT linearizable"
	default:
		return "undecided (timeout)"
	}
}
