// Entry point: starts the torch-preflight language server and wires settings and commands.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ExtensionContext, LogOutputChannel, Uri, WorkspaceFolder, commands, window, workspace } from 'vscode';
import { LanguageClient, State } from 'vscode-languageclient/node';
import { SERVER_NAME } from './common/constants';
import { renderEstimateMarkdown } from './common/estimateReport';
import { activeInterpreter, onDidChangeInterpreter } from './common/python';
import { createClient, discoverPython, installHint, probeServer, run, sendConfiguration } from './common/server';
import { IMPORT_STRATEGY_ENV, ServerCommand, classifyChange, estimateArgs, needsDiscovery, resolveServerCommand, settingsWarnings } from './common/serverOptions';
import { getExtensionSettings, primaryWorkspaceFolder, variableContext } from './common/settings';

let client: LanguageClient | undefined;
let output: LogOutputChannel;
let queue: Promise<void> = Promise.resolve();
/** bundled/tool/launch.py inside the installed extension: runs the bundled (or the environment's) torch-preflight. */
let launcher: string;

/** The command for `resource`'s settings; a Python is searched for only when no setting names one. */
async function commandFor(resource: Uri | undefined, folder: WorkspaceFolder | undefined): Promise<ServerCommand> {
    const settings = getExtensionSettings(resource ?? folder);
    const discovered = needsDiscovery(settings) ? await discoverPython(await activeInterpreter(resource ?? folder?.uri)) : undefined;
    return resolveServerCommand(settings, variableContext(folder), launcher, discovered);
}

function serverCommand(): Promise<ServerCommand> {
    const folder = primaryWorkspaceFolder();
    return commandFor(undefined, folder);
}

async function stopServer(): Promise<void> {
    const old = client;
    client = undefined;
    if (old) {
        try {
            await old.stop();
        } catch (err) {
            output.warn(`stopping the server: ${String(err)}`);
        }
        await old.dispose();
    }
}

async function startServer(): Promise<void> {
    await stopServer();
    const cmd = await serverCommand();
    const cwd = primaryWorkspaceFolder()?.uri.fsPath;
    const strategy = cmd.env?.[IMPORT_STRATEGY_ENV];
    output.info(`Starting the server (${cmd.source}${strategy ? `, ${strategy}` : ''}): ${[cmd.command, ...cmd.prefix, 'server'].join(' ')}`);
    for (const warning of settingsWarnings(getExtensionSettings(primaryWorkspaceFolder()))) {
        void window.showWarningMessage(warning);
    }
    const reason = await probeServer(cmd, cwd);
    if (reason !== undefined) {
        const message = installHint(cmd, reason);
        output.error(message);
        void window.showErrorMessage(message, 'Open Settings', 'Show Output').then((choice) => {
            if (choice === 'Open Settings') {
                void commands.executeCommand('workbench.action.openSettings', 'torchPreflight');
            } else if (choice === 'Show Output') {
                output.show();
            }
        });
        return;
    }
    const next = createClient(cmd, cwd, output);
    try {
        await next.start();
        client = next;
    } catch (err) {
        const message = installHint(cmd, String(err));
        output.error(message);
        void window.showErrorMessage(message);
        await next.dispose();
    }
}

function restart(): Promise<void> {
    queue = queue.then(startServer, startServer);
    return queue;
}

async function showEstimate(context: ExtensionContext): Promise<void> {
    const editor = window.activeTextEditor;
    const doc = editor?.document;
    if (!doc || doc.languageId !== 'python') {
        void window.showInformationMessage('torch-preflight: open a Python file to estimate its VRAM.');
        return;
    }
    let file = doc.uri.fsPath;
    let note = '';
    if (doc.uri.scheme !== 'file' || doc.isUntitled) {
        const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'torch-preflight-'));
        file = path.join(dir, 'untitled.py');
        fs.writeFileSync(file, doc.getText(), 'utf8');
    } else if (doc.isDirty) {
        note = '\n> The file has unsaved changes; this estimate is of the saved version.\n';
    }
    const folder = workspace.getWorkspaceFolder(doc.uri) ?? primaryWorkspaceFolder();
    const settings = getExtensionSettings(doc.uri);
    const cmd = await commandFor(doc.uri, folder);
    const args = estimateArgs(cmd, file, settings);
    output.info(`Running ${[cmd.command, ...args].join(' ')}`);
    const result = await run(cmd.command, args, folder?.uri.fsPath, 120_000, cmd.env);
    let data: unknown;
    try {
        data = JSON.parse(result.stdout);
    } catch {
        const reason = result.error?.code === 'ENOENT' ? `"${cmd.command}" was not found` : result.stderr.trim().split(/\r?\n/).pop() || `exit code ${String(result.code)}`;
        output.error(`estimate failed: ${result.stderr}`);
        void window.showErrorMessage(`torch-preflight estimate failed: ${reason}`, 'Show Output').then((c) => c && output.show());
        return;
    }
    const markdown = renderEstimateMarkdown(data, workspace.asRelativePath(doc.uri)) + note;
    const target = Uri.joinPath(context.globalStorageUri, `estimate-${path.basename(doc.uri.fsPath || 'untitled')}.md`);
    await workspace.fs.createDirectory(context.globalStorageUri);
    await workspace.fs.writeFile(target, Buffer.from(markdown, 'utf8'));
    await commands.executeCommand('markdown.showPreviewToSide', target);
}

export async function activate(context: ExtensionContext): Promise<void> {
    output = window.createOutputChannel(SERVER_NAME, { log: true });
    launcher = context.asAbsolutePath(path.join('bundled', 'tool', 'launch.py'));
    context.subscriptions.push(
        output,
        commands.registerCommand('torch-preflight.restart', () => restart()),
        commands.registerCommand('torch-preflight.showOutput', () => output.show()),
        commands.registerCommand('torch-preflight.estimate', () => showEstimate(context)),
        workspace.onDidChangeConfiguration((event) => {
            const change = classifyChange((key) => event.affectsConfiguration(`torchPreflight.${key}`));
            if (change === 'restart') {
                void restart();
            } else if (change === 'notify' && client?.state === State.Running) {
                for (const warning of settingsWarnings(getExtensionSettings(primaryWorkspaceFolder()))) {
                    void window.showWarningMessage(warning);
                }
                void sendConfiguration(client);
            }
        }),
    );
    const interpreterWatch = await onDidChangeInterpreter(() => {
        const settings = getExtensionSettings(primaryWorkspaceFolder());
        if (classifyChange(() => false, needsDiscovery(settings)) === 'restart') {
            void restart();
        }
    });
    if (interpreterWatch) {
        context.subscriptions.push(interpreterWatch);
    }
    await restart();
}

export async function deactivate(): Promise<void> {
    await stopServer();
}
