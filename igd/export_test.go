package igd

// SetListPage sets the page size of c's GetListOfPortMappings calls, so that
// the tests of package igd_test can page through a real router's table
// without a thousand mappings.
func SetListPage(c *UPnPClient, n int) { c.listPage = n }
