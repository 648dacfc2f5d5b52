package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// cmdVersion prints the module version and the VCS revision the binary was built from, as the Go
// toolchain recorded them (runtime/debug build info).
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "citegate version", stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "citegate version: unexpected argument %q\n", pos[0])
		return errUsage
	}
	fmt.Fprintln(stdout, versionString(debug.ReadBuildInfo()))
	return nil
}

// versionString renders build info as one line: "citegate v1.2.3 (revision abc123def456, 2026-11-30T…,
// modified) go1.26".
func versionString(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "citegate (no build information)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var details []string
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		details = append(details, "revision "+rev)
	} else {
		details = append(details, "revision unknown: built without VCS stamping")
	}
	if when != "" {
		details = append(details, when)
	}
	if modified {
		details = append(details, "modified")
	}
	return fmt.Sprintf("citegate %s (%s) %s", version, strings.Join(details, ", "), bi.GoVersion)
}
