package tools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress is returned (wrapped) when open_web_page would connect to an address that
// must not be reachable from a tool: loopback, private, link-local, CGNAT, ULA, multicast,
// unspecified, reserved, or a cloud metadata endpoint.
var ErrForbiddenAddress = errors.New("address not allowed")

// blockedPrefixes lists the ranges the guard refuses in addition to what netip's predicates
// (loopback, private, link-local, multicast, unspecified) already catch.
var blockedPrefixes = mustPrefixes(
	"0.0.0.0/8",          // "this network"
	"100.64.0.0/10",      // carrier-grade NAT (also hosts Alibaba Cloud's 100.100.100.200 metadata)
	"192.0.0.0/24",       // IETF protocol assignments
	"192.0.2.0/24",       // TEST-NET-1
	"198.18.0.0/15",      // benchmarking
	"198.51.100.0/24",    // TEST-NET-2
	"203.0.113.0/24",     // TEST-NET-3
	"240.0.0.0/4",        // reserved, includes broadcast
	"169.254.169.254/32", // cloud metadata (also link-local; listed for clarity)
	"fc00::/7",           // unique local addresses
	"fe80::/10",          // link-local
	"fec0::/10",          // deprecated site-local
	"fd00:ec2::254/128",  // AWS metadata over IPv6 (inside fc00::/7)
	"2001:db8::/32",      // documentation
	"100::/64",           // discard-only
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// guard decides which addresses the fetcher may connect to.
type guard struct {
	allowNets  []netip.Prefix
	allowHosts map[string]bool
}

// newGuard parses Allow entries: CIDRs, single IPs, or host names (matched case-insensitively,
// without a trailing dot).
func newGuard(allow []string) (*guard, error) {
	g := &guard{allowHosts: make(map[string]bool)}
	for _, raw := range allow {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("fetch allow %q: not a valid CIDR: %w", raw, err)
			}
			g.allowNets = append(g.allowNets, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
			ip = ip.Unmap()
			g.allowNets = append(g.allowNets, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		host := strings.TrimSuffix(strings.ToLower(s), ".")
		if !validHostName(host) {
			return nil, fmt.Errorf("fetch allow %q: neither a CIDR, an IP address nor a host name", raw)
		}
		g.allowHosts[host] = true
	}
	return g, nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// hostAllowed reports whether a host name is listed in Allow.
func (g *guard) hostAllowed(host string) bool {
	return g.allowHosts[strings.TrimSuffix(strings.ToLower(host), ".")]
}

// ipAllowed reports whether the guard lets a connection to ip through.
func (g *guard) ipAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range g.allowNets {
		if p.Contains(ip) {
			return true
		}
	}
	return publicAddr(ip)
}

// publicAddr reports whether ip is an ordinary, globally routable unicast address.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsMulticast() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return false
		}
	}
	// IPv6 forms that embed an IPv4 address (NAT64, 6to4) are judged by the embedded address.
	if ip.Is6() {
		b := ip.As16()
		if nat64.Contains(ip) {
			return publicAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		}
		if sixToFour.Contains(ip) {
			return publicAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return true
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// dialContext returns a DialContext for http.Transport that checks every resolved address at dial
// time (net.Dialer.Control runs after DNS resolution, once per attempted IP), so DNS names that
// resolve to loopback and redirects to private addresses are refused as well. Hosts listed by
// name in Allow skip the check.
func (g *guard) dialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	guarded := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: g.control}
	open := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		if g.hostAllowed(host) {
			return open.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// control is the net.Dialer.Control hook; address is the resolved "ip:port".
func (g *guard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
	}
	if !g.ipAllowed(ap.Addr()) {
		return fmt.Errorf("%w: %s is a private, loopback or otherwise non-public address", ErrForbiddenAddress, ap.Addr().Unmap())
	}
	return nil
}
