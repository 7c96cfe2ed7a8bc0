"""The runtime the scripts used before the gymnasium-native one (issue 47), kept while they move over."""
