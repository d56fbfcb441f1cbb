// Optional: the Python extension's active interpreter, through its public `environments` API.
// Nothing here is required; without ms-python.python the extension uses its own settings.
import { Disposable, Event, Uri, WorkspaceFolder, extensions } from 'vscode';

interface ResolvedEnvironment {
    executable: { uri?: Uri };
}
interface EnvironmentsApi {
    getActiveEnvironmentPath(resource?: Uri | WorkspaceFolder): { path: string };
    resolveEnvironment(env: { path: string } | string): Promise<ResolvedEnvironment | undefined>;
    onDidChangeActiveEnvironmentPath: Event<unknown>;
}
interface PythonExtensionApi {
    environments?: EnvironmentsApi;
}

async function api(): Promise<EnvironmentsApi | undefined> {
    const ext = extensions.getExtension<PythonExtensionApi>('ms-python.python');
    if (!ext) {
        return undefined;
    }
    try {
        const exported = ext.isActive ? ext.exports : await ext.activate();
        return exported?.environments;
    } catch {
        return undefined;
    }
}

/** The active interpreter of the Python extension for `resource`, or undefined. */
export async function activeInterpreter(resource?: Uri): Promise<string[] | undefined> {
    const envs = await api();
    if (!envs) {
        return undefined;
    }
    try {
        const resolved = await envs.resolveEnvironment(envs.getActiveEnvironmentPath(resource));
        const path = resolved?.executable.uri?.fsPath;
        return path ? [path] : undefined;
    } catch {
        return undefined;
    }
}

export async function onDidChangeInterpreter(listener: () => void): Promise<Disposable | undefined> {
    const envs = await api();
    return envs?.onDidChangeActiveEnvironmentPath(() => listener());
}
