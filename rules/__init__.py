"""torch-preflight's rules: one module per rule (`rules.base` holds the shared types), listed in
`rules.registry`. Importing the package loads no rule, so a module that needs only
`rules.base` (the JSON reporter's documentation links, say) stays light."""
