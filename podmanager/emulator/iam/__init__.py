"""The simulated project's identity and access: who calls (`tokens`), what each role grants
(`roles`), what each emulated method needs (`methods`), the project's policy and enabled
services (`project`), Google's refusals (`denials`), and the one check every call passes
(`gate`); `api` serves Resource Manager's testIamPermissions and Service Usage."""
