// Runtime access to @azure/functions' classes from ESM. The package is a CommonJS bundle whose class exports
// Node's ESM loader cannot detect as named exports (`app` it can), so they are read off the default import.
import azureFunctions from '@azure/functions';

export const HttpRequest = azureFunctions.HttpRequest;
export const HttpResponse = azureFunctions.HttpResponse;
export const InvocationContext = azureFunctions.InvocationContext;
