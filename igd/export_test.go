package igd

// SetListPage sets the page size of c's GetListOfPortMappings calls, so that
// the tests of package igd_test can page through a real router's table
// without a thousand mappings.
func SetListPage(c *UPnPClient, n int) { c.listPage = n }

// current returns the cached router, without any I/O. ok is false before the
// first successful discovery and after the router stopped answering.
func (c *UPnPClient) current() (gw Gateway, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gw == nil {
		return Gateway{}, false
	}
	return c.gw.info.clone(), true
}

// Current returns c's cached router, for the tests of package igd_test.
func Current(c *UPnPClient) (Gateway, bool) { return c.current() }
