// Reads `torchPreflight.*` from VS Code; the pure conversion lives in serverOptions.ts.
import * as os from 'node:os';
import { ConfigurationScope, Uri, WorkspaceFolder, workspace } from 'vscode';
import { CONFIG_SECTION } from './constants';
import { DEFAULT_SETTINGS, ExtensionSettings, VariableContext, importStrategy } from './serverOptions';

export function getExtensionSettings(scope?: ConfigurationScope): ExtensionSettings {
    const config = workspace.getConfiguration(CONFIG_SECTION, scope);
    return {
        interpreter: config.get<string[]>('interpreter', DEFAULT_SETTINGS.interpreter),
        path: config.get<string[]>('path', DEFAULT_SETTINGS.path),
        importStrategy: importStrategy(config.get<string>('importStrategy', DEFAULT_SETTINGS.importStrategy)),
        select: config.get<string[]>('select', DEFAULT_SETTINGS.select),
        ignore: config.get<string[]>('ignore', DEFAULT_SETTINGS.ignore),
        gpuMemory: config.get<string | null>('gpuMemory', DEFAULT_SETTINGS.gpuMemory),
        gpu: config.get<string | null>('gpu', DEFAULT_SETTINGS.gpu),
        inlayHintsEnabled: config.get<boolean>('inlayHints.enabled', DEFAULT_SETTINGS.inlayHintsEnabled),
    };
}

/** The workspace folder used for the server process (the first one) and variable expansion. */
export function primaryWorkspaceFolder(): WorkspaceFolder | undefined {
    return workspace.workspaceFolders?.[0];
}

export function variableContext(folder?: WorkspaceFolder | Uri): VariableContext {
    const uri = folder instanceof Uri ? folder : folder?.uri;
    return { workspaceFolder: uri?.fsPath, userHome: os.homedir(), env: process.env };
}
