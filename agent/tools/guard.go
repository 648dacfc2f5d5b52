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

// blockedPrefixes lists the ranges the guard refuses outright, in addition to what netip's
// predicates (loopback, private, link-local, multicast, unspecified) already catch. Every range is
// one the IANA special-purpose registries (RFC 6890 and its updates) mark as not globally
// reachable, or one whose only use is to reach a network that is not ours to open.
var blockedPrefixes = mustPrefixes(
	// IPv4.
	"0.0.0.0/8",          // "this network", RFC 791 / RFC 1122 §3.2.1.3
	"100.64.0.0/10",      // shared address space (carrier-grade NAT), RFC 6598; also Alibaba Cloud's 100.100.100.200 metadata
	"192.0.0.0/24",       // IETF protocol assignments, RFC 6890 §2.2.2
	"192.0.2.0/24",       // TEST-NET-1 documentation, RFC 5737
	"192.88.99.0/24",     // deprecated 6to4 relay anycast, RFC 7526: traffic would leave through an unknown relay
	"198.18.0.0/15",      // benchmarking, RFC 2544
	"198.51.100.0/24",    // TEST-NET-2 documentation, RFC 5737
	"203.0.113.0/24",     // TEST-NET-3 documentation, RFC 5737
	"240.0.0.0/4",        // reserved, RFC 1112 §4; includes limited broadcast 255.255.255.255 (RFC 919)
	"169.254.169.254/32", // cloud metadata (inside link-local 169.254.0.0/16, RFC 3927; listed for clarity)

	// IPv6.
	"::/96",             // IPv4-compatible addresses, deprecated by RFC 4291 §2.5.5.1: no legitimate destination, and some stacks route ::a.b.c.d to a.b.c.d
	"100::/64",          // discard-only, RFC 6666
	"64:ff9b:1::/48",    // local-use IPv4/IPv6 translation, RFC 8215: by definition a translator inside the operator's network, with a prefix length we cannot know
	"2001:2::/48",       // benchmarking, RFC 5180
	"2001:10::/28",      // ORCHID, deprecated, RFC 4843
	"2001:20::/28",      // ORCHIDv2, RFC 7343: identifiers, not routable
	"2001:db8::/32",     // documentation, RFC 3849
	"3fff::/20",         // documentation, RFC 9637
	"5f00::/16",         // segment routing (SRv6) SIDs, RFC 9602: not globally reachable
	"fc00::/7",          // unique local addresses, RFC 4193
	"fd00:ec2::254/128", // AWS metadata over IPv6 (inside fc00::/7; listed for clarity)
	"fe80::/10",         // link-local, RFC 4291 §2.5.6
	"fec0::/10",         // deprecated site-local, RFC 3879
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
	// IPv4-mapped addresses (::ffff:a.b.c.d, ::ffff:0:0/96, RFC 4291 §2.5.5.2) are the IPv4
	// address itself to the kernel; Unmap judges them as such.
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
	if ip.Is6() {
		// IPv6 forms that carry an IPv4 address reach that address through a translator or a
		// tunnel, so they are judged by every IPv4 address they embed.
		for _, v4 := range embeddedIPv4(ip) {
			if !publicAddr(v4) {
				return false
			}
		}
	}
	return true
}

// Prefixes of IPv6 ranges that embed IPv4 addresses.
var (
	// IPv4-translated addresses ::ffff:0:a.b.c.d of SIIT, RFC 2765 §2.1 (obsoleted by RFC 6145,
	// still implemented by translators): a SIIT translator delivers them to a.b.c.d.
	siit = netip.MustParsePrefix("::ffff:0:0:0/96")
	// The NAT64 well-known prefix, RFC 6052 §2.1: 64:ff9b::a.b.c.d is translated to a.b.c.d.
	// (RFC 6052 §3.1 forbids private IPv4 behind it; translators are not obliged to enforce that.)
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// 6to4, RFC 3056: 2002:AABB:CCDD::/48 is the site behind the IPv4 address AA.BB.CC.DD.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// Teredo, RFC 4380 §4: 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC, where S is the Teredo server's
	// IPv4 address and C the client's public IPv4 address with every bit inverted.
	teredo = netip.MustParsePrefix("2001::/32")
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address carries by one of the formats above, or
// in an ISATAP interface identifier (RFC 5214 §6.1: ::0:5efe:a.b.c.d and ::200:5efe:a.b.c.d under
// any prefix, the tunnel endpoint a.b.c.d).
func embeddedIPv4(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	var out []netip.Addr
	switch {
	case siit.Contains(ip), nat64.Contains(ip):
		out = append(out, last)
	case sixToFour.Contains(ip):
		out = append(out, netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
	case teredo.Contains(ip):
		server := netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]})
		client := netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
		out = append(out, server, client)
	}
	if (b[8]|0x02) == 0x02 && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe {
		out = append(out, last)
	}
	return out
}

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
