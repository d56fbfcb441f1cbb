export const SERVER_ID = 'torchPreflight';
export const SERVER_NAME = 'torch-preflight';
export const CONFIG_SECTION = 'torchPreflight';
