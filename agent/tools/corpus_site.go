package tools

// SiteName names the site of a source URL for a reader: the document's title for a page of this
// corpus (its domain is the gateway's own address, often "127.0.0.1", which tells a reader
// nothing), "" for any other URL.
func (c *Corpus) SiteName(rawURL string) string {
	d, ok := c.Lookup(rawURL)
	if !ok {
		return ""
	}
	return d.Title
}
