package kafka

const apiVersionsKey = 18

// coreRoutes are the data-path APIs (api_versions.go, metadata.go,
// produce.go, fetch.go, list_offsets.go).
func coreRoutes() []route {
	return []route{
		{key: 18, min: 0, max: 4, handle: handleApiVersions},
		{key: 3, min: 0, max: 12, handle: handleMetadata},
		{key: 0, min: 3, max: 11, handle: handleProduce},
		{key: 1, min: 4, max: 12, handle: handleFetch},
		{key: 2, min: 1, max: 8, handle: handleListOffsets},
	}
}
