export const SERVER_ID = 'torchPreflight';
export const SERVER_NAME = 'torch-preflight';
export const CONFIG_SECTION = 'torchPreflight';
/** Sections the server may ask for in workspace/configuration (the agreed name, and the kebab form). */
export const CONFIG_SECTIONS: readonly string[] = [CONFIG_SECTION, 'torch-preflight'];
